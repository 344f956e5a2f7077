"""The encoding engines behind :mod:`spar.model.embeddings`: a shard tokenised once into length-sorted batches, then
encoded by a plain inference loop on one device or by Lightning's predict loop on several (``ddp_spawn``, each
rank encoding every n-th batch, the main process merging the ranks' vectors in input order).

Example::

    >>> from spar.model.encoders import BiEncoder
    >>> from spar.model.engines import encode_shard_loop, tokenize_shard
    >>> enc = BiEncoder.from_pretrained("all-MiniLM-L6-v2", pooling="mean", normalize=True)
    >>> shard = tokenize_shard(enc, ["a short query", "a much longer query about vitamin C and scurvy"], "query", 1)
    >>> [len(b) for b in shard.batches], encode_shard_loop(enc, shard, "query", "cpu").shape
    ([1, 1], (2, 384))
"""

from __future__ import annotations

import functools
import itertools
import logging
import os
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Literal, Sequence

import numpy as np
import torch

from spar.core.java import jvm_signal_handlers_kept
from spar.model.encoders import BiEncoder, format_passage
from spar.core.errors import ArtifactError, ConfigError

Side = Literal["query", "passage"]
#: Texts tokenised per call when a shard is prepared (bounds the tokenizer's transient memory).
TOKENIZE_CHUNK = 8192


# ----------------------------------------------------------------------------------------------------------------
# Tokenised shards and batches
# ----------------------------------------------------------------------------------------------------------------


@dataclass
class TokenizedShard:
    """A shard's token ids in one int32 buffer (``offsets``), with length-sorted batches of positions."""

    flat_ids: np.ndarray
    offsets: np.ndarray
    truncated: int
    batches: list[np.ndarray]
    pad_id: int
    with_token_types: bool
    left_padding: bool

    def __len__(self) -> int:
        return len(self.offsets) - 1

    def collate(self, positions: np.ndarray) -> dict[str, torch.Tensor]:
        lengths = self.offsets[positions + 1] - self.offsets[positions]
        width = int(lengths.max())
        ids = np.full((len(positions), width), self.pad_id, dtype=np.int64)
        mask = np.zeros((len(positions), width), dtype=np.int64)
        for row, (pos, length) in enumerate(zip(positions, lengths)):
            start = width - length if self.left_padding else 0
            ids[row, start:start + length] = self.flat_ids[self.offsets[pos]:self.offsets[pos + 1]]
            mask[row, start:start + length] = 1
        batch = {"input_ids": torch.from_numpy(ids), "attention_mask": torch.from_numpy(mask)}
        if self.with_token_types:
            batch["token_type_ids"] = torch.zeros_like(batch["input_ids"])
        return batch


def format_items(encoder: BiEncoder, items: Sequence[Any], side: Side) -> list[str]:
    """The exact strings the encoder's own ``tokenize_*`` would see (prefixes, ``title [SEP] text``)."""
    s = encoder.settings
    if side == "query":
        return [s.query_prefix + t for t in items]
    return [format_passage(p, encoder.sep, s.passage_prefix) for p in items]


def tokenize_shard(encoder: BiEncoder, items: Sequence[Any], side: Side, batch_size: int) -> TokenizedShard:
    """Tokenise a shard once (truncating at the encoder's max length) and cut length-sorted batches."""
    tok = encoder.tokenizer
    max_length = encoder.settings.query_max_length if side == "query" else encoder.settings.passage_max_length
    texts = format_items(encoder, items, side)
    lengths = np.zeros(len(texts), dtype=np.int64)
    chunks: list[np.ndarray] = []
    truncated = 0
    for start in range(0, len(texts), TOKENIZE_CHUNK):
        enc = tok(texts[start:start + TOKENIZE_CHUNK], truncation=True, max_length=max_length,
                  return_attention_mask=False, return_token_type_ids=False)
        ids = enc["input_ids"]
        lengths[start:start + len(ids)] = [len(x) for x in ids]
        chunks.append(np.fromiter(itertools.chain.from_iterable(ids), dtype=np.int32))
        if getattr(enc, "encodings", None):  # fast tokenizers keep what truncation cut off
            truncated += sum(1 for e in enc.encodings if e.overflowing)
        else:
            truncated += sum(1 for x in ids if len(x) >= max_length)
    offsets = np.zeros(len(texts) + 1, dtype=np.int64)
    np.cumsum(lengths, out=offsets[1:])
    # Longest first (an out-of-memory batch shows up at once); stable, so equal lengths keep input order.
    order = np.argsort(-lengths, kind="stable")
    batches = [order[i:i + batch_size] for i in range(0, len(order), batch_size)]
    return TokenizedShard(
        flat_ids=np.concatenate(chunks) if chunks else np.zeros(0, dtype=np.int32), offsets=offsets,
        truncated=truncated, batches=batches, pad_id=int(tok.pad_token_id or 0),
        with_token_types="token_type_ids" in tok.model_input_names, left_padding=tok.padding_side == "left",
    )


# ----------------------------------------------------------------------------------------------------------------
# Devices and engines
# ----------------------------------------------------------------------------------------------------------------


def resolve_devices(accelerator: str, devices: int | str) -> tuple[str, int]:
    """('cuda'|'cpu'|'mps', device count) for a Lightning-style accelerator/devices pair."""
    acc = accelerator.lower()
    if acc in ("auto", "gpu", "cuda") and torch.cuda.is_available():
        available = torch.cuda.device_count()
        if devices in ("auto", -1, "-1"):
            return "cuda", available
        if isinstance(devices, str) and "," in devices:
            return "cuda", len([d for d in devices.split(",") if d.strip()])
        return "cuda", max(1, min(int(devices), available))
    if acc in ("gpu", "cuda"):
        raise ArtifactError(f"encode.accelerator={accelerator!r} but no CUDA device is available")
    if acc == "mps" or (acc == "auto" and torch.backends.mps.is_available()):
        return "mps", 1
    return "cpu", 1


#: /proc/cpuinfo flags of native bf16 arithmetic: Intel AMX tiles, AVX-512 BF16 (Intel Cooper Lake+, AMD Zen 4+).
CPU_BF16_FLAGS = ("amx_bf16", "avx512_bf16")
#: Overrides the detected CPU class: ``none``, ``avx512_bf16`` or ``amx_bf16``. The test suite pins it (so no test
#: depends on the CPU it runs on, and either class can be exercised anywhere); a user can set it to see what
#: ``precision: auto`` would do on another CPU. Unset: the flags are read from ``/proc/cpuinfo``.
CPU_CLASS_ENV = "SPAR_CPU_CLASS"
CPU_CLASSES = ("none", *CPU_BF16_FLAGS)


def cpu_bf16_support() -> str | None:
    """The CPU's native bf16 instructions (``amx_bf16`` or ``avx512_bf16`` as ``/proc/cpuinfo`` names them), or None.

    Detected, not assumed: without them torch's CPU autocast still runs bf16, emulated, slower than fp32. A system
    without ``/proc/cpuinfo`` (macOS, Windows) reports None. ``$SPAR_CPU_CLASS`` (:data:`CPU_CLASS_ENV`) overrides
    the detection:

        >>> import os
        >>> from unittest import mock
        >>> with mock.patch.dict(os.environ, {"SPAR_CPU_CLASS": "avx512_bf16"}):
        ...     cpu_bf16_support(), resolve_precision("cpu", "auto")
        ('avx512_bf16', 'bf16-mixed')
        >>> with mock.patch.dict(os.environ, {"SPAR_CPU_CLASS": "none"}):
        ...     cpu_bf16_support(), resolve_precision("cpu", "auto")
        (None, '32')
    """
    faked = os.environ.get(CPU_CLASS_ENV, "").strip()
    if faked:
        if faked not in CPU_CLASSES:
            raise ConfigError(f"${CPU_CLASS_ENV}={faked!r}: expected one of {', '.join(CPU_CLASSES)} (or unset: "
                              "read the CPU's flags)")
        return None if faked == "none" else faked
    return detected_cpu_bf16()


@functools.lru_cache(maxsize=1)
def detected_cpu_bf16() -> str | None:
    """:func:`cpu_bf16_support` as ``/proc/cpuinfo`` says, ignoring ``$SPAR_CPU_CLASS``."""
    try:
        with open("/proc/cpuinfo") as fh:
            flags = next((line.split(":", 1)[1].split() for line in fh if line.startswith("flags")), [])
    except OSError:
        return None
    return next((flag for flag in CPU_BF16_FLAGS if flag in flags), None)


def cpu_report() -> str:
    """One line: the CPU, its detected class, any ``$SPAR_CPU_CLASS`` override, and what ``precision: auto`` resolves
    to on it (CI logs and the test header print it, so a log says where it ran)."""
    detected = detected_cpu_bf16() or "none"
    faked = os.environ.get(CPU_CLASS_ENV, "").strip()
    used = f"; ${CPU_CLASS_ENV}={faked} overrides it" if faked else ""
    resolved = resolve_precision("cpu", "auto")
    return (f"CPU: {_cpu_name()}; native bf16: {detected}{used}; encode.precision auto -> {resolved} "
            f"({'bf16 autocast' if resolved == 'bf16-mixed' else 'fp32'})")


def resolve_precision(device: str, precision: str) -> str:
    """``32``, ``bf16-mixed`` or ``16-mixed``: what ``encode.precision`` means on ``device``.

    ``auto``: bf16 autocast on GPUs that support it (fp16 on older ones), on CPUs with native bf16
    (:func:`cpu_bf16_support`), fp32 elsewhere. An explicit precision the device cannot run natively is refused in
    one line (bf16 on a CPU without it would be emulated, slower than fp32; fp16 autocast is for GPUs).
    """
    if precision in ("32", "32-true"):
        return "32"
    if device == "cpu":
        if precision == "16-mixed":
            raise ConfigError("encode.precision=16-mixed: fp16 autocast is for GPUs; on the CPU use bf16-mixed (on "
                              "CPUs with AMX or AVX-512 BF16), auto or 32")
        native = cpu_bf16_support()
        if precision == "bf16-mixed" and native is None:
            raise ConfigError(f"encode.precision=bf16-mixed: this CPU ({_cpu_name()}) has no native bf16 (AMX or "
                              "AVX-512 BF16); torch would emulate it, slower than fp32: use encode.precision=auto "
                              "(fp32 here) or 32")
        return "bf16-mixed" if native else "32"
    if precision == "16-mixed":
        return "16-mixed"
    if precision == "bf16-mixed":
        if device == "cuda" and not torch.cuda.is_bf16_supported():
            raise ConfigError("encode.precision=bf16-mixed: this GPU does not support bf16; use 16-mixed or auto")
        return "bf16-mixed"
    return "bf16-mixed" if device == "cuda" and torch.cuda.is_bf16_supported() else "16-mixed"


def _cpu_name() -> str:
    try:
        with open("/proc/cpuinfo") as fh:
            return next(line.split(":", 1)[1].strip() for line in fh if line.startswith("model name"))
    except (OSError, StopIteration):
        import platform

        return platform.processor() or platform.machine()


def autocast_dtype(device: str, precision: str) -> torch.dtype | None:
    """The autocast dtype of ``precision`` on ``device`` (:func:`resolve_precision`), None for fp32."""
    resolved = resolve_precision(device, precision)
    return {"32": None, "bf16-mixed": torch.bfloat16, "16-mixed": torch.float16}[resolved]


def _forward(encoder: BiEncoder, side: Side) -> Callable[[dict[str, torch.Tensor]], torch.Tensor]:
    return encoder.forward_queries if side == "query" else encoder.forward_passages


@torch.inference_mode()
def encode_shard_loop(encoder: BiEncoder, shard: TokenizedShard, side: Side, device: str,
                      precision: str = "auto", on_batch: Callable[[int], None] | None = None) -> np.ndarray:
    """Encode one tokenised shard with a plain inference loop on one device; rows in input order
    (``on_batch(n)`` after each batch of ``n`` items: progress bars)."""
    encoder.eval()
    forward = _forward(encoder, side)
    out = np.empty((len(shard), encoder.dim), dtype=np.float32)
    amp = autocast_dtype(device, precision)
    for positions in shard.batches:
        batch = {k: v.to(device, non_blocking=True) for k, v in shard.collate(positions).items()}
        with torch.autocast(device_type=device, dtype=amp, enabled=amp is not None):
            out[positions] = forward(batch).float().cpu().numpy()
        if on_batch is not None:
            on_batch(len(positions))
    return out


try:  # Lightning is a dependency; the guard keeps `import spar.model.embeddings` light when it is broken.
    import lightning.pytorch as pl
except ImportError:  # pragma: no cover
    pl = None


if pl is not None:

    class ShardBatches(torch.utils.data.Dataset):
        """One item per length-sorted batch of a tokenised shard (the DataLoader runs with ``batch_size=None``)."""

        def __init__(self, shard: TokenizedShard):
            self.shard = shard

        def __len__(self) -> int:
            return len(self.shard.batches)

        def __getitem__(self, index: int) -> dict[str, torch.Tensor]:
            positions = self.shard.batches[index]
            batch = self.shard.collate(positions)
            batch["positions"] = torch.from_numpy(np.asarray(positions, dtype=np.int64))
            return batch

    class EncodeModule(pl.LightningModule):
        """Wraps a :class:`BiEncoder` for ``Trainer.predict``: returns (positions, vectors) per batch."""

        def __init__(self, encoder: BiEncoder, side: Side):
            super().__init__()
            self.encoder = encoder
            self.side = side

        def predict_step(self, batch: dict[str, torch.Tensor], batch_idx: int) -> tuple[torch.Tensor, torch.Tensor]:
            positions = batch.pop("positions")
            return positions, _forward(self.encoder, self.side)(batch).float()

    class RankVectorWriter(pl.callbacks.BasePredictionWriter):
        """Each rank writes its (positions, vectors) as two .npy files; the main process merges them."""

        def __init__(self, directory: Path):
            super().__init__(write_interval="batch")
            self.directory = Path(directory)
            self.positions: list[torch.Tensor] = []
            self.vectors: list[torch.Tensor] = []

        def write_on_batch_end(self, trainer, pl_module, prediction, batch_indices, batch, batch_idx,
                               dataloader_idx=0) -> None:
            positions, vectors = prediction
            self.positions.append(positions.cpu())
            self.vectors.append(vectors.cpu())

        def on_predict_epoch_end(self, trainer, pl_module) -> None:
            dim = pl_module.encoder.dim
            positions = torch.cat(self.positions).numpy() if self.positions else np.zeros(0, dtype=np.int64)
            vectors = torch.cat(self.vectors).numpy() if self.vectors else np.zeros((0, dim), dtype=np.float32)
            rank = trainer.global_rank
            np.save(self.directory / f"rank-{rank}.positions.npy", positions, allow_pickle=False)
            np.save(self.directory / f"rank-{rank}.vectors.npy", vectors, allow_pickle=False)
            self.positions, self.vectors = [], []


def encode_shard_lightning(encoder: BiEncoder, shard: TokenizedShard, side: Side, device: str, n_devices: int,
                           precision: str = "auto", strategy: str = "auto", work_dir: Path | None = None) -> np.ndarray:
    """Encode one tokenised shard with Lightning's predict loop (one or several devices); rows in input order."""
    import tempfile

    if pl is None:  # pragma: no cover
        raise ImportError("lightning is required for engine='lightning'")
    if strategy == "auto":
        # ddp_spawn: the ranks are children of this process, so a CLI run is not re-executed per rank.
        strategy = "ddp_spawn" if n_devices > 1 else "auto"
    amp = autocast_dtype(device, precision)
    lightning_precision = "32-true" if amp is None else ("bf16-mixed" if amp == torch.bfloat16 else "16-mixed")
    with tempfile.TemporaryDirectory(dir=work_dir) as tmp:
        logging.getLogger("lightning.pytorch.utilities.rank_zero").setLevel(logging.WARNING)  # once per shard
        trainer = pl.Trainer(
            accelerator="gpu" if device == "cuda" else device, devices=n_devices, strategy=strategy,
            precision=lightning_precision, logger=False, enable_checkpointing=False, enable_progress_bar=False,
            enable_model_summary=False, callbacks=[RankVectorWriter(Path(tmp))],
        )
        loader = torch.utils.data.DataLoader(ShardBatches(shard), batch_size=None, shuffle=False)
        with warnings.catch_warnings():
            # Batches are whole dicts with their own positions; Lightning's batch-index tracking is not needed.
            warnings.filterwarnings("ignore", message=".*infer the batch indices.*")
            with jvm_signal_handlers_kept():  # Lightning resets an in-process JVM's fault handlers
                trainer.predict(EncodeModule(encoder, side), dataloaders=loader, return_predictions=False)
        out = np.empty((len(shard), encoder.dim), dtype=np.float32)
        seen = np.zeros(len(shard), dtype=bool)
        for pos_file in sorted(Path(tmp).glob("rank-*.positions.npy")):
            positions = np.load(pos_file, allow_pickle=False)
            out[positions] = np.load(str(pos_file).replace(".positions.", ".vectors."), allow_pickle=False)
            seen[positions] = True
    if not seen.all():
        raise RuntimeError(f"Lightning predict returned {int(seen.sum())} of {len(shard)} vectors")
    return out
