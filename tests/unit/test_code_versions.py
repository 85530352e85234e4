"""Code versions that carry a policy digest (what makes the UI show an edited policy as unsynced)
depend on the policy only: the same curation.yaml in another folder gives the same code version,
a changed threshold another one."""

import shutil

from conftest import PROJECT


def test_the_curated_code_version_follows_the_policy_not_the_checkout_folder(tmp_path, monkeypatch):
    from corpus_assets.assets.curation.curated_records import curated_code_version

    monkeypatch.setenv("CORPUS_CURATION", str(PROJECT / "curation.yaml"))
    here = curated_code_version()
    shutil.copy(PROJECT / "curation.yaml", tmp_path / "curation.yaml")
    shutil.copytree(PROJECT / "eval", tmp_path / "eval")
    monkeypatch.setenv("CORPUS_CURATION", str(tmp_path / "curation.yaml"))
    assert curated_code_version() == here and here.startswith("curate-")
    (tmp_path / "curation.yaml").write_text((tmp_path / "curation.yaml").read_text().replace("  tau: 0.5", "  tau: 0.6"))
    assert curated_code_version() != here
