"""The pure parts of agents_app/attachments.py, by table: the type from the first bytes (never the
name), a PDF's page count, a display name made safe, and what the demo model says."""

from __future__ import annotations

import pytest

from agents_app import attachments as files
from tests.attachment_files import GIF, HTML, JPEG, WEBP, pdf, png


@pytest.mark.parametrize(
    "data,kind",
    [
        (png(), "image/png"),
        (JPEG, "image/jpeg"),
        (GIF, "image/gif"),
        (b"GIF87a" + b"\0" * 10, "image/gif"),
        (WEBP, "image/webp"),
        (pdf(1), "application/pdf"),
        (HTML, None),
        (b"", None),
        (b"RIFF\0\0\0\0WAVE", None),
        (b"\x89PNG", None),
        (b"<svg xmlns='x'/>", None),
        (b"%PDF", None),
        (b"PK\x03\x04", None),
    ],
)
def test_sniff(data, kind):
    assert files.sniff(data[:16]) == kind


@pytest.mark.parametrize("pages", [1, 3, 12])
def test_pdf_pages_counts_page_objects_not_the_pages_tree(pages):
    assert files.pdf_pages(pdf(pages)) == pages


def test_pdf_pages_is_none_when_no_page_object_is_visible():
    assert files.pdf_pages(b"%PDF-1.7\n(compressed object streams)\n%%EOF") is None


@pytest.mark.parametrize(
    "raw,kind,clean",
    [
        ("photo.png", "image/png", "photo.png"),
        ("../../etc/passwd", "image/png", "passwd"),
        ("C:\\\\Users\\\\me\\\\scan.pdf", "application/pdf", "scan.pdf"),
        ("a\u0000b\u202ec\r\n.png", "image/png", "abc.png"),
        ("   ", "application/pdf", "attachment.pdf"),
        ("...", "image/jpeg", "attachment.jpeg"),
        (None, "image/webp", "attachment.webp"),
        ("x" * 500 + ".png", "image/png", "x" * files.NAME_MAX),
    ],
)
def test_clean_name(raw, kind, clean):
    assert files.clean_name(raw, kind) == clean


def test_storage_name_takes_ids_only():
    assert files.storage_name("ab" + "0" * 30) == "june/attachments/ab/ab" + "0" * 30
    for bad in ("../x", "A" * 32, "", "a" * 31):
        with pytest.raises(ValueError):
            files.storage_name(bad)
    assert files.read("../../secret") is None


def test_describe():
    assert (
        files.describe({"name": "r.pdf", "type": "application/pdf", "size": 45678, "pages": 3})
        == "r.pdf (application/pdf, 3 pages, 45,678 bytes)"
    )
    assert (
        files.describe({"name": "p.png", "type": "image/png", "size": 12, "pages": None})
        == "p.png (image/png, 12 bytes)"
    )
