"""Typed configuration for every spar stage.

One experiment is one YAML file grouped by stage (as SPLADE's configs are)::

    experiment: {name: scifact, output_dir: runs/scifact}
    data:       {corpus: ../shared/datasets/scifact/corpus.jsonl, ...}
    sample:     {strategy: all, ...}
    label:      {teacher: bm25, k: 50, n_positives: 10, n_negatives: 5}
    train:      {...}
    encode:     {...}
    tune:       {...}
    index:      {...}
    evaluate:   {...}
    publish:    {...}

Every key is validated: an unknown key fails with the closest valid name. Any key can be overridden on the
command line as ``section.key=value`` (the value is parsed as YAML, so ``label.k=100`` gives an int).

Example::

    >>> from spar.core.config import load_config
    >>> cfg = load_config(None, ["label.k=20", "experiment.name=demo"])
    >>> cfg.label.k, cfg.experiment.name
    (20, 'demo')
"""

from __future__ import annotations

import difflib
import os
import sys
import sysconfig
import warnings
from pathlib import Path
from typing import Any, Mapping

import yaml
from pydantic import BaseModel, Field, ValidationError, field_validator, model_validator

from spar.core.config_fields import resolve_paths, section_type
from spar.core.config_search import (  # noqa: F401  (re-exported: every section is spar.core.config's)
    EvaluateSection, IndexSection, PublishSection, TuneSection)
from spar.core.config_sections import (  # noqa: F401  (re-exported: every section is spar.core.config's)
    DEFAULT_SET, EXHAUSTIVE_INDEX_TYPES, INDEX_TYPES, DataSection, EncodeSection, EncoderSection, ExecutorSection,
    ExperimentSection, LabelSection, LambdaEncoderSection, LambdaKind, LambdaSourceSection, LexicalSection, Projection,
    QuestionSetSection, SampleSection, Section, Storage, TrainSection, Variant)
from spar.core.errors import ConfigError
from spar.core.legacy_spellings import DEFAULT_SET_PREFIX, PRE_0_2, folded_default_set

#: The configuration used when ``spar run`` is given no file: the embedded SciFact sample in ``data/``.
DEFAULT_CONFIG_NAME = "default.yaml"
#: Keys that became another key, accepted for one release with a warning: old dotted key -> its replacement.
MOVED_KEYS = {
    PRE_0_2["index.variant"]: ("index.variant", "one setting for the index and the μ tuned for it"),  # spar 0.2
    # #47: every stage logs a W&B run, not evaluate alone (and tune, which read this key too).
    "evaluate.wandb_mode": ("experiment.wandb_mode", "one setting for every stage's W&B run"),
}

#: The keys of an experiment's one question set before spar 0.2, and where they are now: its fields in
#: ``data.question_sets.default`` (:data:`~spar.core.config_sections.DEFAULT_SET`). Read at load with a warning, for
#: one release; ``data.queries`` is the set's ``dev`` and ``test`` questions (one file, split by the qrels). From
#: the one table of the old spellings, :data:`spar.core.legacy_spellings.PRE_0_2`.
FOLDED_KEYS = {then: ", ".join(sorted(options)) for then, options in folded_default_set().items()}


def fold_default_set(tree: Any) -> Any:
    """``tree`` (a config before validation) with the old keys of :data:`FOLDED_KEYS` folded into
    ``data.question_sets.default`` (a warning names them). An old key given over a default set in the new form (a
    command-line override of a copied config) replaces that field. ``data.queries`` set to null, with no qrels left,
    removes the default set (an experiment without questions, or with named sets only)."""
    if not isinstance(tree, dict):
        return tree
    given = {dotted: tree[dotted.split(".")[0]][dotted.split(".")[1]] for dotted in FOLDED_KEYS
             if isinstance(tree.get(dotted.split(".")[0]), dict) and dotted.split(".")[1] in tree[dotted.split(".")[0]]}
    if not given:
        return tree
    tree = dict(tree)
    for section in ("data", "evaluate"):
        if isinstance(tree.get(section), dict):
            tree[section] = {k: v for k, v in tree[section].items() if f"{section}.{k}" not in FOLDED_KEYS}
    data = tree.setdefault("data", {})
    sets = dict(data.get("question_sets") or {})
    current = dict(sets.pop(DEFAULT_SET, None) or {})
    folded = folded_default_set()  # {old key: the default set's options it is now}
    view = {then: next((current[o] for o in options if current.get(o) is not None), None)
            for then, options in folded.items()}  # the default set as its old keys read (data.queries: test, else dev)
    view.update(given)
    as_before = {option: view[then] for then, options in folded.items() for option in options}
    queries, qrels_dev, qrels_test, holdout = (as_before[option] for option in ("test", "qrels_dev", "qrels_test",
                                                                                "dev_holdout_fraction"))
    kept = {k: v for k, v in current.items() if k not in as_before}
    if queries is None and (not (qrels_dev or qrels_test) or PRE_0_2[f"{DEFAULT_SET_PREFIX}test"] in given):
        pass  # no default set (data.queries=null: an experiment without questions, or with named sets only)
    elif queries is None:
        raise ValueError("data.qrels_dev / data.qrels_test are set but data.queries is not: evaluation needs the "
                         "query texts")
    elif not (qrels_dev or qrels_test):
        raise ValueError("data.queries is set but no qrels judge it: set data.qrels_test (and data.qrels_dev or "
                         "data.dev_holdout_fraction)")
    else:
        now = {**as_before, "dev": queries if (qrels_dev or holdout is not None) else None,
               "test": queries if qrels_test else None, **kept}
        sets = {DEFAULT_SET: {k: v for k, v in now.items() if v is not None}, **sets}
    data = dict(data)
    data["question_sets"] = sets
    tree["data"] = data
    warnings.warn(f"config keys {', '.join(sorted(given))} are deprecated and go in the next release: an "
                  f"experiment's one question set is data.question_sets.{DEFAULT_SET} now (spar 0.2: "
                  + ", ".join(f"{old} -> {DEFAULT_SET}.{FOLDED_KEYS[old]}" for old in sorted(given)) + ")",
                  FutureWarning, stacklevel=3)
    return tree


class SparConfig(Section):
    experiment: ExperimentSection = Field(default_factory=ExperimentSection)
    data: DataSection
    sample: SampleSection = Field(default_factory=SampleSection)
    label: LabelSection = Field(default_factory=LabelSection)
    train: TrainSection = Field(default_factory=TrainSection)
    encode: EncodeSection = Field(default_factory=EncodeSection)
    tune: TuneSection = Field(default_factory=TuneSection)
    index: IndexSection = Field(default_factory=IndexSection)
    evaluate: EvaluateSection = Field(default_factory=EvaluateSection)
    publish: PublishSection = Field(default_factory=PublishSection)
    executor: ExecutorSection = Field(default_factory=ExecutorSection)

    #: Where the config was read from (relative data paths resolve against it); not part of fingerprints.
    source: str | None = Field(None, exclude=True)

    @property
    def output_dir(self) -> Path:
        return Path(self.experiment.output_dir)

    @property
    def results_dir(self) -> Path:
        """``experiment.results_dir``, else ``<output_dir>/results``."""
        return Path(self.experiment.results_dir) if self.experiment.results_dir else self.output_dir / "results"

    @model_validator(mode="before")
    @classmethod
    def _default_question_set(cls, tree: Any) -> Any:
        """The old keys of the one question set, folded into ``data.question_sets.default``
        (:func:`fold_default_set`)."""
        return fold_default_set(tree)

    @model_validator(mode="before")
    @classmethod
    def _moved_keys(cls, tree: Any) -> Any:
        """Read an old key (:data:`MOVED_KEYS`) as its replacement, with a warning; both given and different is
        an error."""
        if not isinstance(tree, dict):
            return tree
        for old, (new, why) in MOVED_KEYS.items():
            (old_section, old_key), (new_section, new_key) = old.split("."), new.split(".")
            section = tree.get(old_section)
            if not isinstance(section, dict) or old_key not in section:
                continue
            tree = dict(tree)
            tree[old_section] = {k: v for k, v in section.items() if k != old_key}
            value = section[old_key]
            target = tree.get(new_section) or {}
            if not isinstance(target, dict):
                continue
            if new_key in target and target[new_key] != value:
                raise ValueError(f"{old}={value!r} and {new}={target[new_key]!r}: {old} is deprecated and is {new} "
                                 f"now (one setting); set {new} only")
            tree[new_section] = {**target, new_key: value}
            warnings.warn(f"config key {old} is deprecated and goes in the next release: it is {new} now ("
                          f"{why}); write {new}: {value}",
                          FutureWarning, stacklevel=2)
        return tree

    @field_validator("data", mode="before")
    @classmethod
    def _data_required(cls, value: Any) -> Any:
        if value is None:
            raise ValueError("the 'data' section is required (at least data.corpus)")
        return value

    @model_validator(mode="after")
    def _tune_sets_exist(self) -> "SparConfig":
        sets = self.data.question_sets
        for name in self.tune.sets or []:
            if name not in sets:
                raise ValueError(f"tune.sets names {name!r}, which is not in data.question_sets ({sorted(sets)})")
            if sets[name].dev is None:
                raise ValueError(f"tune.sets names {name!r}, which has no dev questions")
        return self


# ----------------------------------------------------------------------------------------------------------------
# Loading, overrides and errors
# ----------------------------------------------------------------------------------------------------------------


def default_config_path() -> Path:
    """The embedded default experiment: ``configs/default.yaml`` of the source tree (a checkout or an editable
    install), else the copy a wheel installs under ``<prefix>/share/spar/configs/`` next to ``share/spar/data/``
    (pyproject's data-files), so the config's relative data paths resolve the same way in both."""
    repo_copy = Path(__file__).resolve().parents[2] / "configs" / DEFAULT_CONFIG_NAME
    if repo_copy.exists():
        return repo_copy
    candidates = [Path(sysconfig.get_path("data")), Path(sys.prefix)]
    user_scheme = f"{os.name}_user"
    if user_scheme in sysconfig.get_scheme_names():  # pip install --user
        candidates.append(Path(sysconfig.get_path("data", user_scheme)))
    candidates = list(dict.fromkeys(candidates))
    for prefix in candidates:
        installed = prefix / "share" / "spar" / "configs" / DEFAULT_CONFIG_NAME
        if installed.exists():
            return installed
    raise ConfigError(f"the default config {DEFAULT_CONFIG_NAME} is not installed (looked in {repo_copy} and "
                      f"{', '.join(str(p / 'share' / 'spar' / 'configs') for p in candidates)}); pass --config")


def _set_dotted(tree: dict[str, Any], dotted: str, value: Any) -> None:
    node = tree
    parts = dotted.split(".")
    for part in parts[:-1]:
        child = node.get(part)
        if child is None:
            child = node[part] = {}
        if not isinstance(child, dict):
            raise ConfigError(f"override {dotted!r}: {part!r} is a value, not a section")
        node = child
    node[parts[-1]] = value


def parse_overrides(overrides: list[str]) -> list[tuple[str, Any]]:
    """Parse ``section.key=value`` strings; values are YAML (``k=100`` -> int, ``grid=[0.1,1]`` -> list)."""
    parsed = []
    for item in overrides:
        if "=" not in item:
            raise ConfigError(f"override {item!r} is not of the form section.key=value")
        key, raw = item.split("=", 1)
        try:
            value = yaml.safe_load(raw) if raw != "" else ""
        except yaml.YAMLError:
            value = raw
        parsed.append((key.strip(), value))
    return parsed


def _all_keys(model: type[BaseModel], prefix: str = "") -> list[str]:
    keys = []
    for name, field in model.model_fields.items():
        dotted = f"{prefix}{field.alias or name}"
        keys.append(dotted)
        ann = section_type(field.annotation)
        if ann is not None:
            keys.extend(_all_keys(ann, dotted + "."))
    return keys


def _yaml_line(text: str | None, loc: tuple) -> int | None:
    """The line of the YAML ``text`` where the key at ``loc`` is written with no value (None when it is not)."""
    if not text:
        return None
    try:
        node = yaml.compose(text)
    except yaml.YAMLError:
        return None
    line = None
    for key in loc:
        if not isinstance(node, yaml.MappingNode):
            return None
        found = next(((k, v) for k, v in node.value if getattr(k, "value", None) == str(key)), None)
        if found is None:
            return None
        line, node = found[0].start_mark.line + 1, found[1]
    is_null = isinstance(node, yaml.ScalarNode) and node.tag.endswith(":null")
    return line if is_null else None


def _explain(error: ValidationError, source: str, text: str | None = None) -> str:
    valid = _all_keys(SparConfig)
    lines = []
    for item in error.errors():
        dotted = ".".join(str(p) for p in item["loc"])
        if item["input"] is None and item["type"] in ("model_type", "dict_type"):
            # A section whose keys were all deleted: YAML reads "lexical:" as null, and pydantic's "Input should be
            # a valid dictionary" did not say so (#37).
            line = _yaml_line(text, item["loc"])
            example = next((k for k in valid if k.startswith(dotted + ".")), None)
            leaf = dotted.rsplit(".", 1)[-1]
            fix = (f"give it a key (e.g. {example}) or delete the line '{leaf}:' (its defaults then apply)" if example
                   else f"give it its keys or delete the line '{leaf}:'")
            lines.append(f"'{dotted}' is empty{f' ({source}:{line})' if line else ''}: a section with no keys left; "
                         f"{fix}")
            continue
        if item["type"] == "extra_forbidden":
            close = difflib.get_close_matches(dotted, valid, n=1, cutoff=0.6)
            if not close:
                leaf = dotted.rsplit(".", 1)[-1]
                close = [k for k in valid if k.rsplit(".", 1)[-1] in difflib.get_close_matches(
                    leaf, [v.rsplit(".", 1)[-1] for v in valid], n=1, cutoff=0.7)][:1]
            hint = f" (did you mean '{close[0]}'?)" if close else ""
            lines.append(f"unknown key '{dotted}'{hint}")
        else:
            lines.append(f"'{dotted}': {item['msg']}")
    return f"invalid configuration in {source} (or its command-line overrides):\n  " + "\n  ".join(lines)


def load_config(path: str | Path | None = None, overrides: list[str] | None = None) -> SparConfig:
    """Read an experiment YAML (``None``: the embedded default), apply overrides, validate.

    One rule for paths: a relative path written in the YAML (every option marked :data:`~spar.core.config_fields.PATH`
    or :data:`~spar.core.config_fields.PATH_OR_ID`: data files, output and results directories, ``encode.lambda.path``,
    models, ``publish.output``) resolves against the YAML's directory, so a copied config reads and writes beside itself
    wherever it is run from; a relative path given as a command-line override resolves against the current
    directory, like any shell argument. Without ``experiment.output_dir`` a run writes ``runs/<name>`` in the
    current directory (so the embedded default, installed in site-packages, never writes there).
    """
    cfg_path = Path(path) if path is not None else default_config_path()
    if not cfg_path.exists():
        raise ConfigError(f"config file not found: {cfg_path}")
    text = cfg_path.read_text(encoding="utf-8")
    try:
        tree = yaml.safe_load(text) or {}
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f"{cfg_path}:{mark.line + 1}" if mark else str(cfg_path)
        raise ConfigError(f"{where}: not valid YAML: {exc}") from None
    if not isinstance(tree, dict):
        raise ConfigError(f"{cfg_path}: top level must be a mapping of sections")
    try:
        tree = fold_default_set(tree)  # before the paths: data.queries & co. resolve as their new keys
    except ValueError as exc:
        raise ConfigError(f"{cfg_path}: {exc}") from None
    resolve_paths(tree, SparConfig, cfg_path.parent)
    for key, value in parse_overrides(overrides or []):
        _set_dotted(tree, key, value)
    try:
        tree = fold_default_set(tree)  # old keys given as overrides (relative paths: the current directory's)
        cfg = SparConfig.model_validate(tree)
    except ValidationError as exc:
        raise ConfigError(_explain(exc, str(cfg_path), text)) from None
    except ValueError as exc:
        raise ConfigError(f"{cfg_path} (or its command-line overrides): {exc}") from None
    cfg.source = str(cfg_path)
    return cfg


def with_overrides(cfg: SparConfig, overrides: Mapping[str, Any]) -> SparConfig:
    """A new config: ``cfg`` with dotted ``overrides`` (``{"index.storage": "sq4"}``, values as parsed) applied and
    validated again; its source file is kept (a derived run, e.g. a frontier point's)."""
    tree = _given(cfg)
    for key, value in overrides.items():
        _set_dotted(tree, key, value)
    try:
        derived = SparConfig.model_validate(tree)
    except (ValidationError, ValueError) as exc:
        raise ConfigError(f"{getattr(cfg, 'source', 'the config')} with {dict(overrides)}: {exc}") from None
    derived.source = getattr(cfg, "source", None)
    return derived


def write_config(cfg: SparConfig, path: str | Path) -> Path:
    """``cfg`` as a YAML file :func:`load_config` reads back into the same config: what was set (by its YAML or an
    override, paths as resolved), the defaults left to the loading (the full dump of :func:`dump_config` also holds
    deprecated spellings at their defaults, which loading refuses beside their new keys)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(yaml.safe_dump(_given(cfg), sort_keys=False), encoding="utf-8")
    return path


def _given(cfg: SparConfig) -> dict[str, Any]:
    """What was set (by the YAML or an override), as it validated: the defaults, deprecated spellings included, are
    left for validation to fill in again, never carried over as if given."""
    return cfg.model_dump(mode="json", by_alias=True, exclude_unset=True)


def dump_config(cfg: SparConfig) -> str:
    """The fully resolved config as YAML (written into manifests and W&B)."""
    return yaml.safe_dump(cfg.model_dump(mode="json"), sort_keys=False)


def describe_options(section: type[BaseModel], prefix: str) -> list[tuple[str, str, str]]:
    """(dotted key, default, description) for every option of a section, nested sections flattened."""
    rows = []
    for name, field in section.model_fields.items():
        name = field.alias or name
        ann = section_type(field.annotation)
        if ann is not None:
            if field.description and not field.is_required() and field.get_default() is None:
                rows.append((f"{prefix}{name}", "None", field.description))
            rows.extend(describe_options(ann, f"{prefix}{name}."))
            continue
        default = "required" if field.is_required() else repr(field.get_default(call_default_factory=True))
        rows.append((f"{prefix}{name}", default, field.description or ""))
    return rows
