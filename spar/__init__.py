"""spar: teach a dense retriever to imitate a sparse one (SPAR, Chen et al.).

Importing ``spar`` is cheap: it starts no JVM and imports no torch. Heavy modules are imported by the stages
that need them.
"""

__version__ = "0.2.0"
