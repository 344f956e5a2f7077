"""The one table of the spellings fingerprints keep from before spar 0.2, so that runs made before stay up to date.

spar 0.2 moved an experiment's one question set (``data.queries``, ``data.qrels_dev``, ``data.qrels_test``,
``data.dev_holdout_fraction``, ``evaluate.answers``, ``evaluate.answer_match``) into ``data.question_sets.default``,
and ``tune.variant`` into ``index.variant``. A fingerprint that spelled the new keys would differ from the one every
run made before recorded, and every stage from sample on would re-run. So the settings and input keys that
fingerprints hash keep the old spellings, all read from :data:`PRE_0_2`, where fingerprints are computed:

- the default set's files as ``inputs`` keys (:func:`spar.data.question_sets.file_key`: ``queries``, ``qrels_dev``,
  ...), and its options as settings in the ``data`` and ``evaluate`` sections (:func:`old_section_settings`);
- the default set's hold-out as tune's and evaluate's ``dev_holdout_fraction``, and μ's variant as tune's ``variant``
  (:func:`spar.experiment.declarations.tune_section`);
- the config still reads the old keys for one release (:mod:`spar.core.config`: ``FOLDED_KEYS``, ``MOVED_KEYS``).

Options added after runs were made are left out of fingerprints while at their default (the field marker
:data:`spar.core.config_fields.ADDED_LATER`); a search-time option is left out at the value indexes had before it
existed (:data:`SEARCH_TIME_BEFORE`).

Example::

    >>> old_key("data.question_sets.default.test"), old_key("index.variant")
    ('queries', 'variant')
    >>> sorted(old_section("evaluate"))
    ['answer_match', 'answers']
"""

from __future__ import annotations

from typing import Any

from spar.core.config_sections import DEFAULT_SET

#: Each setting fingerprints spell as before spar 0.2: its key now -> its key then. ``data.queries`` was the one
#: questions file of both splits (the test split's first: what fingerprints recorded).
PRE_0_2: dict[str, str] = {
    "data.question_sets.default.test": "data.queries",
    "data.question_sets.default.dev": "data.queries",
    "data.question_sets.default.qrels_dev": "data.qrels_dev",
    "data.question_sets.default.qrels_test": "data.qrels_test",
    "data.question_sets.default.dev_holdout_fraction": "data.dev_holdout_fraction",
    "data.question_sets.default.answers": "evaluate.answers",
    "data.question_sets.default.answer_match": "evaluate.answer_match",
    "index.variant": "tune.variant",
}

#: Where the default question set lives now (the prefix of its entries in :data:`PRE_0_2`).
DEFAULT_SET_PREFIX = f"data.question_sets.{DEFAULT_SET}."

#: A search-time index option at the value indexes had before it existed is left out of the settings results and
#: fingerprints record (:func:`spar.index.files.search_settings`).
SEARCH_TIME_BEFORE: dict[str, Any] = {"refine": 0}


def old_key(now: str) -> str:
    """The name fingerprints give the setting ``now`` (a dotted key of :data:`PRE_0_2`): its old option name."""
    return PRE_0_2[now].rsplit(".", 1)[1]


def old_section(section: str) -> dict[str, list[str]]:
    """``{old option: [its keys now]}`` of the old keys of ``section`` (``data``, ``evaluate``, ``tune``), in
    :data:`PRE_0_2`'s order."""
    found: dict[str, list[str]] = {}
    for now, then in PRE_0_2.items():
        then_section, option = then.split(".")
        if then_section == section:
            found.setdefault(option, []).append(now)
    return found


def default_set_option(now: str) -> str | None:
    """The default question set's option a key of :data:`PRE_0_2` is (``test`` for its questions), else None."""
    return now.removeprefix(DEFAULT_SET_PREFIX) if now.startswith(DEFAULT_SET_PREFIX) else None


def folded_default_set() -> dict[str, list[str]]:
    """``{old key: [the default question set's options it is now]}`` (``data.queries``: ``test`` and ``dev``)."""
    found: dict[str, list[str]] = {}
    for now, then in PRE_0_2.items():
        option = default_set_option(now)
        if option is not None:
            found.setdefault(then, []).append(option)
    return found


def old_section_settings(section: str, read: Any) -> dict[str, Any]:
    """The settings fingerprints record under ``section``'s old keys: for each, the first value ``read(key now)``
    gives that is not None (``data.queries``: the test questions, else the dev ones), else None."""
    values = {}
    for option, keys in old_section(section).items():
        found = [value for value in (read(key) for key in keys) if value is not None]
        values[option] = found[0] if found else None
    return values
