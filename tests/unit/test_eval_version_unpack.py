"""A version's folder is unpacked with plain files and folders only, inside its target: through
tarfile's "data" filter, or (Python before 3.11.4, which has none) by the same rules by hand."""

from __future__ import annotations

import io
import tarfile

import pytest

from june_evals.agent_versions import _extract


def _archive(*members: tuple[str, bytes | None]) -> tarfile.TarFile:
    raw = io.BytesIO()
    with tarfile.open(fileobj=raw, mode="w:") as tar:
        for name, data in members:
            info = tarfile.TarInfo(name)
            if data is None:
                info.type, info.linkname = tarfile.SYMTYPE, "/etc/passwd"
            else:
                info.size = len(data)
            tar.addfile(info, io.BytesIO(data or b""))
    raw.seek(0)
    return tarfile.open(fileobj=raw, mode="r:")


@pytest.fixture(params=["filter", "by hand"])
def python(request, monkeypatch):
    if request.param == "by hand":
        monkeypatch.delattr(tarfile, "data_filter")
    return request.param


def test_a_folder_is_unpacked(tmp_path, python):
    _extract(_archive(("clerk/agent.py", b"x = 1\n"), ("clerk/instructions.md", b"hi")), tmp_path)
    assert (tmp_path / "clerk" / "agent.py").read_text() == "x = 1\n"
    assert (tmp_path / "clerk" / "instructions.md").read_bytes() == b"hi"


@pytest.mark.parametrize("member", [("../outside.py", b"x"), ("clerk/link", None)])
def test_a_member_leaving_the_folder_or_a_link_is_refused(tmp_path, python, member):
    target = tmp_path / "in"
    target.mkdir()
    with pytest.raises((ValueError, tarfile.TarError)):
        _extract(_archive(("clerk/agent.py", b"x"), member), target)
    assert not (tmp_path / "outside.py").exists()
    assert not (target / "clerk" / "link").is_symlink()


def test_an_absolute_name_lands_inside_or_is_refused(tmp_path, python):
    target = tmp_path / "in"
    target.mkdir()
    try:
        _extract(_archive(("/abs.py", b"x")), target)
    except (ValueError, tarfile.TarError):
        assert python == "by hand"
    else:
        assert python == "filter" and (target / "abs.py").read_bytes() == b"x"
