"""Kill a real static-Λ training with SIGKILL at each checkpoint boundary, resume it, and report what each run exported.

Run by tests/test_resume.py as ``python tests/train_kill_harness.py RUN_DIR OUT_DIR SETTINGS_JSON``: ``RUN_DIR`` holds
``queries/passages.arrow`` and ``labels/``. Every training runs in a process forked from this one (the imports are
paid once). A boundary ("event") is the end of a ``Trainer.save_checkpoint`` call, of the Λ's export (``save``) and
of the removal of ``best.ckpt``; the child SIGKILLs itself right after the k-th one. Writes ``OUT_DIR/report.json``:
the uninterrupted run's events and exported files, and for each k the resumed run's.
"""

from __future__ import annotations

import hashlib
import json
import os
import signal
import sys
import traceback
from pathlib import Path

import torch

torch.set_num_threads(1)

import lightning.pytorch as pl  # noqa: E402

from spar.core.config import TrainSection  # noqa: E402
from spar.lexical import build_lambda  # noqa: E402
from spar.train.training import CHECKPOINT_DIR, train_lambda  # noqa: E402


def _train(run: Path, work: Path, settings: dict, kill_at: int, record: Path) -> None:
    """One training into ``work`` (resuming whatever is there), killed after event ``kill_at`` (0: never)."""
    events: list[str] = []

    def event(name: str) -> None:
        events.append(name)
        record.write_text(json.dumps({"events": events}))
        if len(events) == kill_at:
            os.kill(os.getpid(), signal.SIGKILL)

    save_checkpoint = pl.Trainer.save_checkpoint

    def saving(self, filepath, *args, **kwargs):
        save_checkpoint(self, filepath, *args, **kwargs)
        event(f"save {Path(filepath).name} at step {self.global_step}")

    pl.Trainer.save_checkpoint = saving  # type: ignore[method-assign]
    unlink = Path.unlink

    def unlinking(self, *args, **kwargs):
        unlink(self, *args, **kwargs)
        if self.name.startswith("best") and self.parent.name == CHECKPOINT_DIR:
            event(f"remove {self.name}")

    Path.unlink = unlinking  # type: ignore[method-assign]
    train = TrainSection.model_validate(settings)
    passages = run / "queries" / "passages.arrow"
    model = build_lambda(train, passages, teacher="bm25", k1=0.9, b=0.4, fields=("title", "text"), seed=0)
    export = type(model).save

    def exporting(self, directory):
        export(self, directory)
        event("export")

    type(model).save = exporting  # type: ignore[method-assign]
    result = train_lambda(model, train, passages, run / "labels", work, seed=0, enable_progress_bar=False)
    record.write_text(json.dumps({"events": events, "best_step": result.best_step,
                                  "best_valid_mrr": result.best_valid_mrr, "steps": result.steps,
                                  "resumed_from_step": result.resumed_from_step}))


def _forked(*args) -> int:
    pid = os.fork()
    if pid == 0:
        code = 0
        try:
            _train(*args)
        except BaseException:
            traceback.print_exc()
            code = 3
        finally:
            os._exit(code)
    return os.waitpid(pid, 0)[1]


def _exported(work: Path) -> dict[str, str]:
    """SHA-256 of every file the export wrote (checkpoints and logs aside)."""
    return {str(p.relative_to(work)): hashlib.sha256(p.read_bytes()).hexdigest() for p in sorted(work.rglob("*"))
            if p.is_file() and CHECKPOINT_DIR not in p.relative_to(work).parts and p.suffix in (".json", ".txt",
                                                                                                ".safetensors", ".npy")}


def main() -> None:
    run, out, settings = Path(sys.argv[1]), Path(sys.argv[2]), json.loads(sys.argv[3])
    out.mkdir(parents=True, exist_ok=True)
    status = _forked(run, out / "straight", settings, 0, out / "straight.json")
    assert status == 0, f"the uninterrupted run failed ({status})"
    reference = json.loads((out / "straight.json").read_text())
    report = {"reference": {**reference, "exported": _exported(out / "straight")}, "killed": []}
    for k in range(1, len(reference["events"]) + 1):
        work = out / f"killed-{k}"
        killed = _forked(run, work, settings, k, out / f"killed-{k}.json")
        events = json.loads((out / f"killed-{k}.json").read_text())["events"]
        resumed = _forked(run, work, settings, 0, out / f"resumed-{k}.json")
        report["killed"].append({"k": k, "killed_status": killed, "killed_after": events[-1] if events else None,
                                 "resumed_status": resumed, **json.loads((out / f"resumed-{k}.json").read_text()),
                                 "exported": _exported(work)})
    (out / "report.json").write_text(json.dumps(report, indent=1))


if __name__ == "__main__":
    main()
