"""Attachments in eval cases: files beside a JSONL dataset (or uploaded on a case's admin page)
are sent with each run of the case as a person's message's are — a copy per turn, owned by
nobody, taken by the turn — and a case made from a session keeps its message's files."""

from __future__ import annotations

import json

import pytest
from django.contrib.auth import get_user_model
from django.core.files.uploadedfile import SimpleUploadedFile

from agents_app.models import Attachment
from june_evals import driver
from june_evals.datasets import dataset_load, examples_from_sessions, run_rows
from june_evals.models import Dataset, EvalCase, Example, ExampleFile
from sessions_app import attachment_services as attachments
from sessions_app import models as m
from sessions_app import services
from sessions_app.site_errors import BadRequest
from tests.attachment_files import pdf, png
from tests.integration.test_evals import drive_here

pytestmark = pytest.mark.django_db(transaction=True)


def write_dataset(folder, cases) -> object:
    path = folder / "receipts.jsonl"
    path.write_text("".join(json.dumps(c) + "\n" for c in cases))
    return path


def test_a_cases_files_go_with_each_of_its_turns(tmp_path):
    (tmp_path / "files").mkdir()
    (tmp_path / "files" / "receipt.png").write_bytes(png())
    (tmp_path / "files" / "invoice.pdf").write_bytes(pdf(pages=2))
    path = write_dataset(
        tmp_path,
        [
            {
                "name": "two files",
                "input": "what did I send?",
                "attachments": ["files/receipt.png", "files/invoice.pdf"],
                "expect": {"contains": ["I received 2 attachments", "receipt.png", "invoice.pdf", "2 pages"]},
            },
            {"name": "none", "input": "hello", "expect": {"equals": "You said: hello"}},
        ],
    )
    dataset = dataset_load(path=path)
    assert [(f.name, f.content_type) for f in ExampleFile.objects.order_by("id")] == [
        ("receipt.png", "image/png"),
        ("invoice.pdf", "application/pdf"),
    ]
    run = driver.run_start(
        dataset=dataset, versions=[driver.version("ops", label="A"), driver.version("ops", label="B")]
    )
    drive_here(run)
    cases = list(EvalCase.objects.filter(run=run, example__name="two files"))
    assert len(cases) == 2 and all(c.passed for c in cases), [c.scores for c in cases]
    for case in cases:  # each turn took its own copy, owned by nobody
        sent = Attachment.objects.filter(turn_id=case.turn_id).order_by("created_at")
        assert [(a.name, a.owner_id) for a in sent] == [("receipt.png", None), ("invoice.pdf", None)]
        turn = m.Turn.objects.get(pk=case.turn_id)
        assert [a["name"] for a in turn.input["attachments"]] == ["receipt.png", "invoice.pdf"]
    assert len({a.id for a in Attachment.objects.all()}) == 4
    assert [r["attachments"] for r in run_rows(run) if r["name"] == "two files"] == [["receipt.png", "invoice.pdf"]] * 2


def test_a_file_that_is_no_attachment_is_refused_with_its_case(tmp_path):
    (tmp_path / "notes.txt").write_text("plain text")
    path = write_dataset(tmp_path, [{"input": "read it", "attachments": ["notes.txt"]}])
    with pytest.raises(BadRequest, match="case 1: attachment notes.txt: attachments must be PNG"):
        dataset_load(path=path)
    path = write_dataset(tmp_path, [{"input": "read it", "attachments": ["missing.png"]}])
    with pytest.raises(BadRequest, match="case 1: cannot read attachment missing.png"):
        dataset_load(path=path)
    path = write_dataset(tmp_path, [{"input": "read it", "attachments": "receipt.png"}])
    with pytest.raises(BadRequest, match="line 1: 'attachments' is a list of files"):
        dataset_load(path=path)
    assert not Dataset.objects.filter(name="receipts").exists() or not Example.objects.exists()


def test_staff_attach_a_file_on_a_cases_page_and_a_session_case_keeps_its_files(client):
    staff = get_user_model().objects.create_user("staff", password="pw", is_staff=True, is_superuser=True)
    client.force_login(staff)
    dataset = Dataset.objects.create(name="admin files")
    example = Example.objects.create(dataset=dataset, input="what is this?")
    url = f"/admin/june_evals/example/{example.pk}/change/"
    form = {
        "dataset": dataset.pk, "name": "", "input": "what is this?", "expect": "{}",
        "files-TOTAL_FORMS": "1", "files-INITIAL_FORMS": "0", "files-MIN_NUM_FORMS": "0", "files-MAX_NUM_FORMS": "1000",
    }  # fmt: skip
    refused = client.post(url, {**form, "files-0-file": SimpleUploadedFile("x.txt", b"plain text")})
    assert refused.status_code == 200 and b"attachments must be PNG" in refused.content
    done = client.post(url, {**form, "files-0-file": SimpleUploadedFile("scan.png", png())})
    assert done.status_code == 302, done.content[:2000]
    [f] = example.files.all()
    assert (f.name, f.content_type, f.size) == ("scan.png", "image/png", len(png()))
    assert b"scan.png" in client.get(f"/admin/june_evals/dataset/{dataset.pk}/change/").content

    # a person's message with a file, made into a case: the case keeps a copy of the file
    user = get_user_model().objects.create_user("ann", password="pw")
    upload = attachments.attachment_upload(agent="ops", key="s1", user=user, upload=SimpleUploadedFile("a.png", png()))
    services.turn_start(agent="ops", key="s1", text="look", user=user, attachments=[upload.id])
    made = examples_from_sessions(dataset=dataset, sessions=m.Session.objects.filter(key="s1"))
    assert made == 1
    copied = Example.objects.get(dataset=dataset, source__startswith="ops/s1").files.get()
    assert (copied.name, copied.size) == ("a.png", len(png()))
    # its file goes with it (a user's erasure deletes the cases made of their sessions)
    name = copied.file.name
    Example.objects.filter(pk=copied.example_id).delete()
    assert not copied.file.storage.exists(name)
