"""ONNX Runtime as the CPU backend of a transformer :class:`~spar.model.encoders.BiEncoder` (``encode.backend``).

``encode.backend``: ``torch`` (the PyTorch modules, the default), ``onnx`` (each encoder exported once to ONNX and
run by an ONNX Runtime ``InferenceSession`` on the CPU) or ``auto`` (``onnx`` when encoding runs on the CPU,
``torch`` on a GPU). What it buys depends on the CPU: the vectors are the same (max abs difference 2.4e-7 over
SciFact, the same nDCG@10 to every digit), but on an Intel Xeon (AVX-512, where torch runs MKL) ONNX Runtime
measured 0.8-1.0x torch's throughput, while a measurement outside the project saw 2.5-3.3x (bench/README.md), so
``torch`` stays the default.

Tokenisation, prefixes, max lengths, length-sorted batches, pooling (mean/cls) and normalisation are the torch
path's own: :class:`OnnxBiEncoder` is a :class:`~spar.model.encoders.BiEncoder` whose transformer forward pass
(``input_ids``/``attention_mask``/``token_type_ids`` -> last hidden state) runs in ONNX Runtime, so every engine
and API that drives a ``BiEncoder`` (``encode_shard_loop``, ``encode_query``/``encode_passage``) drives it
unchanged. Query and passage encoders with separate weights (``passage_model``, a DPR Λ) get one file each.

Why spar's own export: sentence-transformers' ONNX backend goes through ``optimum``, whose release pins
``transformers < 5`` (installing it would downgrade spar's transformers). The export here is
``torch.onnx.export`` (the TorchScript exporter: the dynamo exporter needs ``onnxscript``, not a dependency) of a
deep copy of the encoder with eager attention, with dynamic batch and sequence axes, then ONNX Runtime's own BERT
fusions (``onnxruntime.transformers.optimizer``: fused attention, GELU and layer norms), kept only when the fused
graph still matches. The copy matters: ``torch.onnx.export`` changes the outputs of the module object it traced
(measured: the last hidden state moved by 1.24), so the encoder that keeps running in the process is never the
one exported. Each export is checked against the torch encoder on two probe batches (with padding) before it is
cached.

**The cache.** Files live under ``$SPAR_CACHE_DIR/onnx/<key>/`` (default ``$XDG_CACHE_HOME/spar``, else
``~/.cache/spar``), never beside the model: :func:`spar.model.resolve.model_fingerprint` and a Λ's directory fingerprint
hash the JSON files in a model directory, so a file written there would change the fingerprints of every run made
with that model, and bundled models live inside an installed package. ``<key>`` hashes the weights themselves
(every tensor's bytes), the model config, the export recipe and the torch/onnx/onnxruntime versions, so a cached
file is re-used exactly when it would be rebuilt the same. Each directory holds ``model.onnx`` (``model-int8.onnx``
for the int8 variant) and ``spar_onnx.json`` (size, SHA-256, whether fusion held, the probe's max difference);
both are written atomically. A cached file whose size or SHA-256 no longer matches its record (truncated,
overwritten) is exported again, with a warning; one that ONNX Runtime cannot load is a one-line
:class:`~spar.core.errors.ArtifactError` naming it.

**Fingerprints.** An encoder run by ONNX Runtime is identified by the torch encoder's fingerprint plus
:meth:`OnnxBiEncoder.backend_record` (the backend and each exported file's SHA-256):
:func:`spar.model.embeddings.encoder_fingerprint` adds it, so switching the backend re-encodes. ``torch`` adds nothing:
its fingerprints are those of spar before this backend existed.

**int8** (``onnx-int8``): ``onnxruntime.quantization.quantize_dynamic`` of the plain (unfused) export (int8
weights, activations quantised per batch): 1.3-1.5x torch here, but its vectors drift (mean cosine 0.937 to
torch's) and SciFact's base nDCG@10 drops by 1.5 points (SPAR's by 0.08): never chosen by ``auto``.

Example::

    >>> import tempfile
    >>> from spar.model.encoders import BiEncoder
    >>> from spar.model.onnx_encoder import OnnxBiEncoder
    >>> enc = BiEncoder.from_pretrained("all-MiniLM-L6-v2", pooling="mean", normalize=True)
    >>> texts = ["what causes scurvy", "vitamin C deficiency and bleeding gums in sailors"]
    >>> with tempfile.TemporaryDirectory() as cache:  # default: $SPAR_CACHE_DIR/onnx or ~/.cache/spar/onnx
    ...     fast = OnnxBiEncoder.from_encoder(enc, cache_dir=cache)
    ...     same = float(abs(fast.encode_query(texts) - enc.encode_query(texts)).max()) < 1e-5
    >>> same, fast.backend_record()["backend"], fast.files["query"].path == fast.files["passage"].path
    (True, 'onnx', True)
"""

from __future__ import annotations

import copy
import functools
import json
import logging
import os
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import numpy as np
import torch
from torch import nn

from spar.core.artifacts import atomic_file, write_json_atomic
from spar.core.fingerprint import digest, file_sha256
from spar.model.encoders import BiEncoder
from spar.core.errors import ArtifactError, ConfigError

log = logging.getLogger(__name__)

Backend = Literal["auto", "torch", "onnx", "onnx-int8"]
BACKENDS: tuple[str, ...] = ("auto", "torch", "onnx", "onnx-int8")
#: Bump when the export recipe changes: it is part of every cache key.
RECIPE = 1
OPSET = 17
CACHE_ENV = "SPAR_CACHE_DIR"
INFO_FILE = "spar_onnx.json"
#: Largest absolute difference of the last hidden state (real tokens only) between an export and the torch encoder
#: on the probe batches; measured differences are ~1e-6 (float32 reassociation).
PROBE_TOLERANCE = 1e-3
INPUT_ORDER = ("input_ids", "attention_mask", "token_type_ids")


def cache_root(cache_dir: str | Path | None = None) -> Path:
    """Where exported files live: ``cache_dir``, else ``$SPAR_CACHE_DIR/onnx``, else ``$XDG_CACHE_HOME/spar/onnx``,
    else ``~/.cache/spar/onnx``."""
    if cache_dir is not None:
        return Path(cache_dir)
    if os.environ.get(CACHE_ENV):
        return Path(os.environ[CACHE_ENV]).expanduser() / "onnx"
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base).expanduser() / "spar" / "onnx"


def _versions() -> dict[str, str]:
    import onnx
    import onnxruntime
    import transformers

    return {"torch": torch.__version__, "onnx": onnx.__version__, "onnxruntime": onnxruntime.__version__,
            "transformers": transformers.__version__}


def weights_key(model: nn.Module, input_names: tuple[str, ...]) -> str:
    """Identifies an export: every weight tensor's bytes, the model config, the inputs, the recipe and versions."""
    config = getattr(model, "config", None)
    # Private entries (`_name_or_path`, ...) say where the model was read from, not what it computes.
    described = {k: v for k, v in config.to_dict().items() if not k.startswith("_")} if config is not None else None

    def chunks():
        yield json.dumps({"recipe": RECIPE, "opset": OPSET, "inputs": list(input_names), **_versions(),
                          "config": described}, sort_keys=True, default=str).encode()
        for name, tensor in model.state_dict().items():
            t = tensor.detach().to("cpu").contiguous()
            yield f"{name}:{t.dtype}:{tuple(t.shape)}".encode()
            yield t.view(-1).view(torch.uint8).numpy().tobytes() if t.numel() else b""

    with torch.no_grad():
        return digest(chunks(), 24)


def _sha256(path: Path) -> str:
    stat = path.stat()
    return _sha256_of(str(path), stat.st_size, stat.st_mtime_ns)


@functools.lru_cache(maxsize=64)
def _sha256_of(path: str, size: int, mtime_ns: int) -> str:
    """SHA-256 of a file, once per (path, size, mtime) in a process (query and passage sides share a file)."""
    return file_sha256(path)


@dataclass(frozen=True)
class OnnxFile:
    """One exported encoder: its path, SHA-256 and what :data:`INFO_FILE` records about it."""

    path: Path
    sha256: str
    info: dict[str, Any]


class _Wrapper(nn.Module):
    """The transformer as a function of positional token tensors (the TorchScript exporter passes positionals)."""

    def __init__(self, model: nn.Module, input_names: tuple[str, ...]):
        super().__init__()
        self.model = model
        self.input_names = input_names

    def forward(self, *inputs: torch.Tensor) -> torch.Tensor:
        return self.model(**dict(zip(self.input_names, inputs))).last_hidden_state


def _probe_batches(model: nn.Module, input_names: tuple[str, ...]) -> list[dict[str, torch.Tensor]]:
    """Two batches of different shapes, each with a padded row (seeded, ids away from special tokens)."""
    vocab = int(getattr(getattr(model, "config", None), "vocab_size", 1000))
    gen = torch.Generator().manual_seed(0)
    batches = []
    for rows, width in ((2, 8), (3, 13)):
        ids = torch.randint(min(1000, vocab // 2), vocab, (rows, width), generator=gen)
        mask = torch.ones(rows, width, dtype=torch.int64)
        mask[-1, width // 2:] = 0
        ids = ids.masked_fill(mask == 0, 0)
        batch = {"input_ids": ids, "attention_mask": mask, "token_type_ids": torch.zeros_like(ids)}
        batches.append({k: batch[k] for k in input_names})
    return batches


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[0][:300] if text else type(exc).__name__


def _load_session(path: Path, threads: int | None = None):
    import onnxruntime as ort

    options = ort.SessionOptions()
    options.intra_op_num_threads = int(threads or torch.get_num_threads())
    options.inter_op_num_threads = 1
    options.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    options.log_severity_level = 3  # errors only: spar's own messages say what went wrong
    try:
        return ort.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])
    except Exception as exc:  # onnxruntime raises its own exception types (InvalidProtobuf, Fail, ...)
        raise ArtifactError(f"{path}: not a loadable ONNX model ({_first_line(exc)}); delete its directory to "
                            "export it again") from None


def _run(session, batch: dict[str, torch.Tensor]) -> np.ndarray:
    return session.run(["last_hidden_state"], {k: v.numpy() for k, v in batch.items()})[0]


def _probe_difference(session, model: nn.Module, batches: list[dict[str, torch.Tensor]]) -> float:
    """Max |ONNX − torch| of the last hidden state over the real (unpadded) tokens of the probe batches."""
    worst = 0.0
    device, training = next(model.parameters()).device, model.training
    model.eval()  # no dropout in the reference; the caller's mode is restored
    try:
        with torch.inference_mode():
            for batch in batches:
                ref = model(**{k: v.to(device) for k, v in batch.items()}).last_hidden_state.float().cpu().numpy()
                mask = batch["attention_mask"].numpy().astype(bool)
                worst = max(worst, float(np.abs(_run(session, batch) - ref)[mask].max()))
    finally:
        model.train(training)
    return worst


def _fuse(path: Path, model: nn.Module) -> Path | None:
    """ONNX Runtime's BERT fusions (attention, GELU, layer norm) of ``path`` into a sibling file; None when the
    optimiser fails on this architecture."""
    from onnxruntime.transformers import optimizer

    config = getattr(model, "config", None)
    heads = int(getattr(config, "num_attention_heads", 0) or 0)
    hidden = int(getattr(config, "hidden_size", 0) or 0)
    target = path.with_name(path.name + ".fused")
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            logging.getLogger("onnxruntime.transformers").setLevel(logging.ERROR)
            fused = optimizer.optimize_model(str(path), model_type="bert", num_heads=heads, hidden_size=hidden,
                                             opt_level=0)
            fused.save_model_to_file(str(target))
    except Exception as exc:  # an architecture the fusion patterns do not know: keep the plain graph
        log.info("ONNX fusion skipped (%s)", _first_line(exc))
        target.unlink(missing_ok=True)
        return None
    return target


def _export(model: nn.Module, input_names: tuple[str, ...], target: Path, fuse: bool = True) -> dict[str, Any]:
    """Export ``model`` (a deep copy with eager attention) to ``target``, fuse (``fuse``), check; returns the
    record."""
    exported = copy.deepcopy(model).to("cpu").float().eval()
    if hasattr(exported, "set_attn_implementation"):
        exported.set_attn_implementation("eager")
    elif getattr(exported, "config", None) is not None:
        exported.config._attn_implementation = "eager"
    probes = _probe_batches(model, input_names)
    raw = target.with_name(f".{target.name}.raw-{os.getpid()}")
    names = list(input_names)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # tracer and deprecation warnings of the TorchScript exporter
            torch.onnx.export(
                _Wrapper(exported, input_names), tuple(probes[0][k] for k in input_names), str(raw),
                input_names=names, output_names=["last_hidden_state"], opset_version=OPSET, dynamo=False,
                dynamic_axes={k: {0: "batch", 1: "sequence"} for k in [*names, "last_hidden_state"]},
                do_constant_folding=True,
            )
        del exported
        chosen, fused = raw, False
        fused_path = _fuse(raw, model) if fuse else None
        if fused_path is not None:
            diff = _probe_difference(_load_session(fused_path, 1), model, probes)
            if diff <= PROBE_TOLERANCE:
                chosen, fused = fused_path, True
            else:
                log.info("ONNX fusion changed the outputs by %.2g: using the plain graph", diff)
        diff = _probe_difference(_load_session(chosen, 1), model, probes)
        if diff > PROBE_TOLERANCE:
            raise ArtifactError(f"the ONNX export of {type(model).__name__} differs from torch by {diff:.3g} on a "
                                f"probe batch (tolerance {PROBE_TOLERANCE}): use encode.backend=torch")
        with atomic_file(target) as tmp:
            os.replace(chosen, tmp)
    finally:
        raw.unlink(missing_ok=True)
        raw.with_name(raw.name + ".fused").unlink(missing_ok=True)
    return {"fused": fused, "probe_max_abs_diff": diff}


def _quantize(source: Path, target: Path) -> dict[str, Any]:
    from onnxruntime.quantization import QuantType, quantize_dynamic

    with atomic_file(target) as tmp, warnings.catch_warnings():
        warnings.simplefilter("ignore")
        logging.getLogger("root").setLevel(logging.ERROR)  # quantize_dynamic logs through the root logger
        quantize_dynamic(str(source), str(tmp), weight_type=QuantType.QInt8)
    return {"quantized": "dynamic int8 (onnxruntime.quantization.quantize_dynamic, QInt8 weights)"}


def _cached(path: Path) -> OnnxFile | None:
    """The cached file when its record matches it (size and SHA-256); None when missing; re-export otherwise."""
    info_path = path.parent / INFO_FILE
    if not path.exists() or not info_path.exists():
        return None
    try:
        info = json.loads(info_path.read_text()).get(path.name)
        size_ok = isinstance(info, dict) and info.get("size") == path.stat().st_size
        sha = _sha256(path) if size_ok else None
    except (OSError, ValueError, AttributeError):
        info, sha = None, None
    if not isinstance(info, dict) or sha != info.get("sha256"):
        log.warning("%s does not match its record in %s (truncated or changed): exporting it again", path, INFO_FILE)
        return None
    return OnnxFile(path, str(sha), info)


def exported_model(model: nn.Module, input_names: tuple[str, ...], quantize: bool = False,
                   cache_dir: str | Path | None = None) -> OnnxFile:
    """The cached ONNX export of ``model`` (exported, checked and cached on first use; see the module docstring)."""
    directory = cache_root(cache_dir) / weights_key(model, input_names)
    path = directory / ("model-int8.onnx" if quantize else "model.onnx")
    found = _cached(path)
    if found is not None:
        return found
    try:
        directory.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise ConfigError(f"{directory}: cannot create the ONNX cache ({_first_line(exc)}); set {CACHE_ENV} to a "
                          "writable directory") from None
    if quantize:  # from the plain graph: the quantiser's shape inference does not know the fused contrib ops
        plain = path.with_name(f".plain-{os.getpid()}.onnx")
        try:
            record = {**_export(model, input_names, plain, fuse=False), **_quantize(plain, path)}
        finally:
            plain.unlink(missing_ok=True)
    else:
        log.info("exporting %s to ONNX (%s)", type(model).__name__, path)
        record = _export(model, input_names, path)
    record.update(size=path.stat().st_size, sha256=_sha256(path), opset=OPSET, recipe=RECIPE, **_versions())
    info_path = directory / INFO_FILE
    try:
        records = json.loads(info_path.read_text()) if info_path.exists() else {}
    except (OSError, ValueError):
        records = {}
    records = records if isinstance(records, dict) else {}
    records[path.name] = record
    write_json_atomic(info_path, records)
    return OnnxFile(path, record["sha256"], record)


class OnnxBiEncoder(BiEncoder):
    """A :class:`~spar.model.encoders.BiEncoder` whose transformer runs in ONNX Runtime (CPU); everything else, from
    tokenisation to pooling and normalisation, is the torch encoder's. Sessions are opened on first use with
    ``torch.get_num_threads()`` intra-op threads, and dropped when the object is pickled (a worker process
    re-opens them, re-exporting into its own cache when the file is not there, and refuses an export that differs
    from the recorded one)."""

    def __init__(self, encoder: BiEncoder, files: dict[str, OnnxFile], backend: str = "onnx",
                 cache_dir: str | Path | None = None):
        super().__init__(encoder.query_model, encoder.passage_model, encoder.tokenizer, encoder.settings)
        self.files = files
        self.backend = backend
        self.cache_dir = None if cache_dir is None else str(cache_dir)
        self._sessions: dict[str, Any] = {}

    @classmethod
    def from_encoder(cls, encoder: BiEncoder, backend: str = "onnx",
                     cache_dir: str | Path | None = None) -> "OnnxBiEncoder":
        """Export (or find in the cache) the query and passage encoders of ``encoder``."""
        if isinstance(encoder, OnnxBiEncoder) and encoder.backend == backend:
            return encoder
        if backend not in ("onnx", "onnx-int8"):
            raise ConfigError(f"encode.backend={backend!r} is not an ONNX backend")
        names = cls._input_names(encoder)
        quantize = backend == "onnx-int8"
        query = exported_model(encoder.query_model, names, quantize, cache_dir)
        passage = (query if encoder.passage_model is encoder.query_model
                   else exported_model(encoder.passage_model, names, quantize, cache_dir))
        return cls(encoder, {"query": query, "passage": passage}, backend, cache_dir)

    @staticmethod
    def _input_names(encoder: BiEncoder) -> tuple[str, ...]:
        wanted = set(encoder.tokenizer.model_input_names) | {"input_ids", "attention_mask"}
        return tuple(k for k in INPUT_ORDER if k in wanted)

    def backend_record(self) -> dict[str, Any]:
        """What enters the encoder's fingerprint: the backend and each exported file's SHA-256 (16 hex digits)."""
        return {"backend": self.backend, "query": self.files["query"].sha256[:16],
                "passage": self.files["passage"].sha256[:16]}

    def manifest_record(self) -> dict[str, Any]:
        """What an embeddings manifest records: the fingerprint's record plus files, fusion and versions."""
        import onnxruntime

        return {**self.backend_record(), "onnxruntime": onnxruntime.__version__,
                "files": {side: {"path": str(f.path), "sha256": f.sha256, "fused": f.info.get("fused")}
                          for side, f in self.files.items()}}

    def _session(self, side: str):
        onnx_file = self.files[side]
        key = str(onnx_file.path)
        if key not in self._sessions:
            if not onnx_file.path.exists():  # another process or machine: export into its own cache
                model = self.query_model if side == "query" else self.passage_model
                again = exported_model(model, self._input_names(self), self.backend == "onnx-int8", self.cache_dir)
                if again.sha256 != onnx_file.sha256:
                    raise ArtifactError(f"{again.path}: this machine's ONNX export differs from the one the "
                                        f"encoder was planned with ({onnx_file.path}): align torch/onnx versions "
                                        "or use encode.backend=torch")
                self.files[side] = onnx_file = again
            self._sessions[key] = _load_session(onnx_file.path)
        return self._sessions[key]

    def _hidden(self, model: nn.Module, inputs: dict[str, torch.Tensor]) -> torch.Tensor:
        session = self._session("query" if model is self.query_model else "passage")
        feed = {k: v.to("cpu", torch.int64) for k, v in inputs.items()}
        return torch.from_numpy(_run(session, feed))

    def __getstate__(self) -> dict[str, Any]:
        return {**self.__dict__, "_sessions": {}}


def backend_name(encoder: Any) -> str:
    """The backend an encoder runs on: ``onnx``/``onnx-int8`` for :class:`OnnxBiEncoder`, else ``torch``."""
    return encoder.backend if isinstance(encoder, OnnxBiEncoder) else "torch"


def with_backend(encoder: Any, backend: str, device: str = "cpu", cache_dir: str | Path | None = None) -> Any:
    """``encoder`` on ``backend`` (``auto``: ONNX Runtime when ``device`` is the CPU, torch otherwise).

    Term-based Λ kinds (not a :class:`~spar.model.encoders.BiEncoder`) are returned unchanged. ``auto`` falls back to
    torch, with a warning, when the export fails; an explicit ``onnx`` fails with one line instead, and refuses a
    GPU ``device`` (ONNX Runtime runs here on the CPU).
    """
    if backend not in BACKENDS:
        raise ConfigError(f"encode.backend={backend!r}: expected one of {', '.join(BACKENDS)}")
    if not isinstance(encoder, BiEncoder):
        return encoder
    if backend == "torch" or (backend == "auto" and device != "cpu"):
        return encoder
    if backend == "auto":
        try:
            return OnnxBiEncoder.from_encoder(encoder, "onnx", cache_dir)
        except Exception as exc:  # auto: any export failure means torch
            log.warning("encode.backend=auto: the ONNX export failed (%s); encoding with torch", _first_line(exc))
            return encoder
    if device != "cpu":
        raise ConfigError(f"encode.backend={backend} runs on the CPU, but encoding is set to run on {device}: set "
                          "encode.accelerator=cpu, or encode.backend=auto (torch on GPUs)")
    try:
        return OnnxBiEncoder.from_encoder(encoder, backend, cache_dir)
    except (ArtifactError, ConfigError):
        raise
    except Exception as exc:
        raise ArtifactError(f"cannot export {type(encoder.query_model).__name__} to ONNX ({_first_line(exc)}): use "
                            "encode.backend=torch") from None
