"""The published SPAR model: its directory and card, searching with it, indexing any corpus with it.

The old module ``spar.publish`` is this package now; its names are exported here, each imported from its new home on
first use.
See docs/architecture.md for the packages and who imports whom.
"""

from spar._compat import lazy_exports

_EXPORTS = {
    "MODEL_CONFIG": "spar.publish.model_dir",
    "MODEL_FORMAT": "spar.publish.model_dir",
    "MODEL_FORMAT_VERSION": "spar.publish.model_dir",
    "ROUTES": "spar.publish.model_dir",
    "SIDES": "spar.publish.model_dir",
    "ENCODER_NAMES": "spar.publish.model_dir",
    "SparEncoder": "spar.publish.model_dir",
    "encoder_dirs": "spar.publish.model_dir",
    "load_published_encoder": "spar.publish.model_dir",
    "required_files": "spar.publish.model_dir",
    "check_model_dir": "spar.publish.model_dir",
    "is_model_dir": "spar.publish.model_dir",
    "UPLOAD_IGNORE": "spar.publish.model_dir",
    "push_to_hub": "spar.publish.model_dir",
    "publish_model": "spar.publish.model_dir",
    "portable_path": "spar.publish.model_dir",
    "locate_model": "spar.publish.model_dir",
    "published_fingerprint": "spar.publish.model_dir",
}
__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS)
