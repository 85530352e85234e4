"""``corpus releases check [NAME|FILE]``: OK per valid spec, one ``file: field: message`` line per
problem and a non-zero exit code otherwise; ``corpus releases [NAME]`` still lists the registry."""

from __future__ import annotations

import pytest

from corpus_assets.cli import main
from corpus_assets.domain.core.settings import project_root

GOOD = "name: good\nsnapshots: {sources: [a]}\npacking: {seq_len: 256}\n"
TYPO = "name: typo\nsnapshots: {sources: [a]}\npackng: {seq_len: 256}\n"
NOTINT = 'name: notint\nsnapshots: {sources: [a]}\npacking: {seq_len: "x"}\n'


@pytest.fixture
def releases(tmp_path, monkeypatch):
    """A releases folder under the working directory, so output paths read ``releases/<name>.yaml``."""
    folder = tmp_path / "releases"
    folder.mkdir()
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("CORPUS_RELEASES", str(folder))
    monkeypatch.setenv("CORPUS_HOME", str(tmp_path / "home"))
    monkeypatch.delenv("CORPUS_CATALOG", raising=False)
    return folder


def _run(capsys, *argv) -> tuple[int, list[str], str]:
    code = main(["releases", *argv])
    out = capsys.readouterr()
    return code, out.out.splitlines(), out.err


def test_valid_spec_by_name_and_by_file(releases, capsys):
    (releases / "good.yaml").write_text(GOOD)
    assert _run(capsys, "check", "good") == (0, ["OK releases/good.yaml"], "")
    assert _run(capsys, "check", "releases/good.yaml") == (0, ["OK releases/good.yaml"], "")
    assert _run(capsys, "check", str(releases / "good.yaml")) == (0, ["OK releases/good.yaml"], "")


def test_all_specs_one_line_per_problem_and_a_failing_exit_code(releases, capsys):
    for name, body in (("good", GOOD), ("typo", TYPO), ("notint", NOTINT)):
        (releases / f"{name}.yaml").write_text(body)
    code, lines, err = _run(capsys, "check")
    assert code == 1 and err == ""
    assert lines == [
        "OK releases/good.yaml",
        "releases/notint.yaml: packing.seq_len: Input should be a valid integer, unable to parse string as an integer",
        "releases/typo.yaml: packng: Extra inputs are not permitted",
    ]
    assert _run(capsys, "check", "typo") == (1, ["releases/typo.yaml: packng: Extra inputs are not permitted"], "")
    code, lines, _ = _run(capsys, "check", "notint")
    assert code == 1 and lines == ["releases/notint.yaml: packing.seq_len: Input should be a valid integer, "
                                   "unable to parse string as an integer"]


def test_several_problems_of_one_spec_are_one_line_each(releases, capsys):
    (releases / "many.yaml").write_text("name: many\nsnapshots: {sources: [a]}\npackng: {}\nsplit: {fractions: [2]}\n"
                                        "token_views: {max_tokens: 0}\n")
    code, lines, _ = _run(capsys, "check", "many")
    assert code == 1
    assert [line.split(": ")[1] for line in lines] == ["split.fractions", "token_views.max_tokens", "packng"]
    assert all(line.startswith("releases/many.yaml: ") for line in lines)


def test_missing_file_and_unknown_release_name_fail(releases, capsys):
    (releases / "good.yaml").write_text(GOOD)
    code, lines, _ = _run(capsys, "check", "elsewhere/absent.yaml")
    assert code == 1 and len(lines) == 1
    assert lines[0].startswith("elsewhere/absent.yaml: cannot read config file: [Errno 2] No such file")
    code, lines, _ = _run(capsys, "check", "nope")
    assert code == 1 and lines == ["releases/nope.yaml: unknown release 'nope': no such spec (known releases: good)"]


def test_the_shipped_demo_spec_checks(monkeypatch, capsys):
    monkeypatch.chdir(project_root())
    monkeypatch.delenv("CORPUS_RELEASES", raising=False)
    code, lines, _ = _run(capsys, "check")
    assert code == 0 and "OK releases/demo.yaml" in lines and all(line.startswith("OK ") for line in lines)


def test_releases_still_lists_the_registry(releases, capsys):
    from corpus_assets.domain.core.settings import catalog_path
    from corpus_assets.domain.release.registry import register_published
    from corpus_assets.domain.storage.catalog import Catalog

    (releases / "good.yaml").write_text(GOOD)
    assert _run(capsys, "good") == (0, ["no published releases"], "")
    register_published(Catalog.at(catalog_path()), "good", "1" * 64, "a" * 64, "releases/good/" + "1" * 64)
    code, lines, _ = _run(capsys)
    assert code == 0 and len(lines) == 1 and lines[0].split()[:3] == ["good", "1" * 16, "published"]
    assert _run(capsys, "good")[1] == lines
    code, lines, err = _run(capsys, "good", "extra")
    assert code == 2 and lines == [] and "corpus releases check extra" in err
