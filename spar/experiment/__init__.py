"""One experiment's assembled inputs: which Λ it uses, its artifacts for tuning and evaluation, preflight checks.

The old module ``spar.experiment`` is this package now; its names are exported here, each imported from its new home on
first use.
See docs/architecture.md for the packages and who imports whom.
"""

from spar._compat import lazy_exports

_EXPORTS = {
    "ENCODERS": "spar.experiment.inputs",
    "split_queries": "spar.data.question_sets",
    "STREAM_BLOCK": "spar.evaluate.exact",
    "STREAM_BYTES": "spar.experiment.inputs",
    "top_k": "spar.evaluate.exact",
    "dense_search": "spar.evaluate.exact",
    "ExperimentInputs": "spar.experiment.inputs",
}
__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS)
