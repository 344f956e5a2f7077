"""spar: teach a dense retriever to imitate a sparse one (SPAR, Chen et al.).

Importing ``spar`` is cheap: it starts no JVM and imports no torch. Heavy modules are imported by the stages
that need them.
"""

__version__ = "0.1.0"

from spar._compat import install as _install_old_paths

_install_old_paths()  # the module paths before spar 0.2, kept for one release
