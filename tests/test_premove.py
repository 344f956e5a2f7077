"""Models published before spar/ moved into subpackages (spar 0.1) load with the same vectors, and saving one again
keeps the published format: the saved files are what these fixtures guard (as sentence-transformers keeps old module
paths for the pickles and configs that name them; spar's saved files name no module path of spar).

The models under ``tests/fixtures/premove/`` were published by the code of commit 468a90b, the last one before the
move (``tests/fixtures/make_premove_models.py`` says how); ``expected.json`` holds the vectors that code gave.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parents[1]
PREMOVE = ROOT / "tests" / "fixtures" / "premove"
MODELS = ("projection", "projection-sparse", "static", "transformer")


def _python(code: str, *args: str, **kwargs) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", code, *args], cwd=ROOT, capture_output=True, text=True, timeout=600,
                          **kwargs)


def _expected(name: str) -> tuple[list[str], list, dict[str, np.ndarray]]:
    data = json.loads((PREMOVE / "expected.json").read_text())
    passages = [tuple(p) for p in data["passages"]]
    vectors = {k: np.asarray(v, dtype=np.float32) for k, v in data["vectors"][name].items()}
    return data["queries"], passages, vectors


@pytest.mark.parametrize("name", MODELS)
def test_a_model_published_before_the_move_loads_with_the_same_vectors(name):
    from spar.lexical.st_modules import load_sentence_transformer
    from spar.publish.model_dir import SparEncoder

    queries, passages, expected = _expected(name)
    enc = SparEncoder.from_pretrained(PREMOVE / name)
    assert enc.mu == pytest.approx(0.37) and enc.lambda_.kind == name.split("-")[0]
    np.testing.assert_allclose(enc.encode_queries(queries), expected["queries"], atol=2e-6)
    np.testing.assert_allclose(enc.encode_passages(passages), expected["passages"], atol=2e-6)
    st = load_sentence_transformer(str(PREMOVE / name), device="cpu")
    np.testing.assert_allclose(st.encode_query(queries, convert_to_numpy=True), expected["queries"], atol=2e-5)
    np.testing.assert_allclose(st.encode_document(passages, convert_to_numpy=True), expected["passages"], atol=2e-5)


def test_a_model_published_before_the_move_loads_where_spar_is_not_installed(tmp_path):
    """sentence-transformers with trust_remote_code runs the model's own spar_modules.py / spar_analysis.py /
    spar_random_tables.py copies (made before the move) with spar unimportable."""
    code = """
import importlib.abc, json, sys
class NoSpar(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name == "spar" or name.startswith("spar."):
            raise ModuleNotFoundError(f"No module named {name!r} (blocked)")
sys.meta_path.insert(0, NoSpar())
from sentence_transformers import SentenceTransformer
out = {}
data = json.loads(open(sys.argv[2]).read())
for name in sys.argv[1].split(","):
    st = SentenceTransformer(f"{sys.argv[3]}/{name}", device="cpu", trust_remote_code=True)
    passages = [tuple(p) for p in data["passages"]]
    out[name] = {"queries": st.encode_query(data["queries"], convert_to_numpy=True).tolist(),
                 "passages": st.encode_document(passages, convert_to_numpy=True).tolist()}
assert not any(m == "spar" or m.startswith("spar.") for m in sys.modules)
print(json.dumps(out))
"""
    models = tmp_path / "models"
    shutil.copytree(PREMOVE, models)
    done = _python(code, ",".join(MODELS), str(PREMOVE / "expected.json"), str(models),
                   env={"HF_HUB_OFFLINE": "1", "HF_MODULES_CACHE": str(tmp_path / "hf-modules"),
                        "PATH": "/usr/bin:/bin", "HOME": str(tmp_path)})
    assert done.returncode == 0, done.stderr[-3000:]
    vectors = json.loads(done.stdout.strip().splitlines()[-1])
    for name in MODELS:
        _, _, expected = _expected(name)
        np.testing.assert_allclose(np.asarray(vectors[name]["queries"]), expected["queries"], atol=2e-5)
        np.testing.assert_allclose(np.asarray(vectors[name]["passages"]), expected["passages"], atol=2e-5)


@pytest.mark.parametrize("name", ["projection", "transformer"])
def test_republishing_keeps_the_model_format(name, tmp_path):
    """A pre-move model saved again by the moved code: the same files, the same JSON (but the version stamps), the
    shipped modules copied from their new homes under their fixed names."""
    from spar.lexical import analysis, random_tables, st_modules
    from spar.publish.model_dir import SparEncoder

    out = tmp_path / name
    SparEncoder.from_pretrained(PREMOVE / name).save_pretrained(out, model_card=f"# premove {name}\n")
    files = {str(p.relative_to(PREMOVE / name)) for p in (PREMOVE / name).rglob("*") if p.is_file()}
    assert {str(p.relative_to(out)) for p in out.rglob("*") if p.is_file()} == files
    spar_files = ("spar_model.json", "modules.json", "router_config.json", "config_sentence_transformers.json",
                  "spar_combination.json", "lexical_bag.json")  # (the tokenizers' files are transformers')
    for json_file in sorted(f for f in files if Path(f).name in spar_files):
        old, new = json.loads((PREMOVE / name / json_file).read_text()), json.loads((out / json_file).read_text())
        for stamps in (old, new):
            if isinstance(stamps, dict):
                stamps.pop("spar_version", None), stamps.pop("__version__", None), stamps.pop("created", None)
        # What changed on purpose since: spar_model.json format 2 records each file's checksum (#48), and the
        # Router has no default route, so encode() without a task is refused (#47).
        if json_file == "spar_model.json":
            assert (new.pop("format_version"), old.pop("format_version")) == (2, 1)
            assert set(new.pop("checksums")) >= {"modules.json", "base/model.safetensors"}
        if json_file == "router_config.json":
            assert new["parameters"] == {**old["parameters"], "default_route": None, "allow_empty_key": False}
            new["parameters"] = old["parameters"]
        assert new == old, json_file
    for shipped, module in (("spar_modules.py", st_modules), ("spar_analysis.py", analysis),
                            ("spar_random_tables.py", random_tables)):
        assert (out / shipped).read_text() == Path(module.__file__).read_text()
