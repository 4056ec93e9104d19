"""The golden-transcript recorder and the harness's serverio-from-another-commit support.

The recorder (bench/golden.py) drives serverio only through its command
line; these tests check that its transcript is reproducible, that what it
masks is exactly what varies between runs, and that ``diff`` reports
field-level differences with the right exit code.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from bench import callgrind, cli, commits, golden
from bench.servers import SERVERS
from bench.trials import RunOptions

REPO = Path(__file__).resolve().parent.parent


def _line(rid: str, status: int = 200, etag: str = '"x"', sha: str = "00") -> dict[str, object]:
    return {
        "flags": "default",
        "id": rid,
        "request": f"GET {rid}",
        "responses": [
            {
                "status": status,
                "reason": "OK",
                "headers": [["date", "<date>"], ["etag", etag]],
                "body_len": 2,
                "body_sha256": sha,
                "framed": True,
            }
        ],
        "end": "closed",
        "trailing_len": 0,
        "trailing_sha256": "e3",
    }


def _bench(*argv: str) -> int:
    return cli.dispatch(cli.build_parser().parse_args(argv))


def _write(path: Path, lines: list[dict[str, object]]) -> Path:
    path.write_text("".join(json.dumps(x) + "\n" for x in [{"kind": "meta"}, *lines]))
    return path


@pytest.mark.slow
def test_transcript_is_identical_across_two_runs_of_the_same_code(tmp_path: Path) -> None:
    target = golden.target_from_args(None, None, None, None)
    first = golden.record(target, golden.SMOKE)
    second = golden.record(target, golden.SMOKE)
    assert first == second
    # Not trivially equal: the run served files, validators, ranges and
    # listings, and the masked fields were masked.
    records = [r for r in first if "id" in r]
    assert len(records) > 100
    statuses = {resp["status"] for r in records for resp in r["responses"]}
    assert {200, 206, 301, 304, 400, 404, 405, 412, 416} <= statuses
    etags = [
        v for r in records for resp in r["responses"] for k, v in resp["headers"] if k == "etag"
    ]
    # File validators name no device or inode (nothing of them to mask):
    # 1k.bin's is the hash of its bytes, 300k.bin's its size and mtime.
    tree = golden.build_tree(tmp_path)
    one_k = hashlib.blake2b((tree / "1k.bin").read_bytes(), digest_size=16).hexdigest()
    assert f'"{one_k}"' in etags
    assert not any("<ino:" in e for e in etags)
    assert any(e.startswith(f'"{300 * 1024:x}-') for e in etags)
    dates = {
        v for r in records for resp in r["responses"] for k, v in resp["headers"] if k == "date"
    }
    assert dates == {"<date>"}
    assert {r["flags"] for r in records} == set(golden.SMOKE.flag_sets)
    kept = {r["id"] for r in records}
    assert golden.SMOKE.keep <= kept
    multipart = [
        v
        for r in records
        for resp in r["responses"]
        for k, v in resp["headers"]
        if k == "content-type" and v.startswith("multipart/")
    ]
    assert multipart and all("boundary=<boundary>" in v for v in multipart)
    a = tmp_path / "a.jsonl"
    b = tmp_path / "b.jsonl"
    golden.write(a, first)
    golden.write(b, second)
    assert a.read_bytes() == b.read_bytes()
    assert golden.diff(a, b, out=lambda s: None) == 0


def test_tree_is_the_same_bytes_names_and_mtimes_every_time(tmp_path: Path) -> None:
    def snapshot(base: Path) -> list[tuple[str, bytes, int, str]]:
        root = golden.build_tree(base)
        out = []
        for p in sorted(root.rglob("*")):
            st = p.lstat()
            kind = "link:" + os.readlink(p) if p.is_symlink() else "dir" if p.is_dir() else "file"
            data = p.read_bytes() if kind == "file" else b""
            out.append((p.relative_to(root).as_posix(), data, st.st_mtime_ns, kind))
        return out

    (tmp_path / "1").mkdir()
    (tmp_path / "2").mkdir()
    one, two = snapshot(tmp_path / "1"), snapshot(tmp_path / "2")
    assert one == two
    names = {name for name, *_ in one}
    assert {"empty.txt", "300k.bin", "64k.txt.gz", "64k.txt.br", ".hidden.txt"} <= names
    assert {"caf\u00e9.txt", "100%.txt", "what?.txt", "hash#.txt", "semi;colon.txt"} <= names
    sizes = {name: len(data) for name, data, _, kind in one if kind == "file"}
    assert (sizes["empty.txt"], sizes["1k.bin"], sizes["64k.bin"]) == (0, 1024, 65536)
    assert sizes["300k.bin"] == 300 * 1024
    links = {name: kind for name, _, _, kind in one if kind.startswith("link:")}
    assert links["link-out.txt"] == "link:../outside/secret.txt"


def test_masker_hides_device_inode_and_multipart_boundary_only() -> None:
    masker = golden.Masker(dev=0xFE00, inodes={0x20C0CB: "/1k.bin"})
    assert masker.etag('"fe00-20c0cb-400-18ec"') == '"<dev>-<ino:/1k.bin>-400-18ec"'
    assert masker.etag('"fe00-20c0cb-400-18ec-gzip"') == '"<dev>-<ino:/1k.bin>-400-18ec-gzip"'
    # Not this tree's device or inode, or a listing's weak hash: kept as is.
    assert masker.etag('"fe01-20c0cb-400-18ec"') == '"fe01-20c0cb-400-18ec"'
    assert masker.etag('"fe00-1-400-18ec"') == '"fe00-1-400-18ec"'
    assert masker.etag('W/"ad99354"') == 'W/"ad99354"'

    def multipart(boundary: str) -> golden.Response:
        body = f"\r\n--{boundary}\r\nContent-Range: bytes 0-0/9\r\n\r\nA\r\n--{boundary}--\r\n"
        return golden.Response(
            206,
            "Partial Content",
            [
                ("date", "Sun, 06 Nov 1994 08:49:37 GMT"),
                ("content-type", f"multipart/byteranges; boundary={boundary}"),
                ("content-length", str(len(body))),
            ],
            body.encode(),
            True,
        )

    short, long = masker.response(multipart("b1")), masker.response(multipart("serverio-abc12"))
    assert short == long
    assert ["content-type", "multipart/byteranges; boundary=<boundary>"] in short["headers"]
    assert ["date", "<date>"] in short["headers"]
    plain = golden.Response(200, "OK", [("content-length", "3")], b"abc", True)
    assert masker.response(plain)["headers"] == [["content-length", "3"]]


def test_parse_responses_knows_head_responses_have_no_body() -> None:
    data = (
        b"HTTP/1.1 200 OK\r\ncontent-length: 5\r\n\r\n"
        b"HTTP/1.1 404 Not Found\r\ncontent-length: 2\r\n\r\nno"
    )
    resps, rest = golden.parse_responses(data, ("HEAD", "GET"))
    assert [(r.status, r.body) for r in resps] == [(200, b""), (404, b"no")]
    assert rest == b""
    # Method unknown (a fuzz case): a status line right after the head means no body.
    resps, _ = golden.parse_responses(data)
    assert [(r.status, r.body) for r in resps] == [(200, b""), (404, b"no")]
    # A body cut short is recorded as not framed.
    resps, _ = golden.parse_responses(b"HTTP/1.1 200 OK\r\ncontent-length: 9\r\n\r\nabc", ("GET",))
    assert not resps[0].framed and resps[0].body == b"abc"


def test_fuzz_corpus_is_fixed_by_its_seed() -> None:
    assert golden.fuzz_corpus(1, 20) == golden.fuzz_corpus(1, 20)
    assert golden.fuzz_corpus(1, 20) != golden.fuzz_corpus(2, 20)
    ids = [r.id for r in golden.matrix()]
    assert len(ids) == len(set(ids)), "request ids must be unique"


def test_diff_prints_differing_ids_with_fields_and_exits_1(tmp_path: Path) -> None:
    a = _write(tmp_path / "a.jsonl", [_line("/same"), _line("/etag"), _line("/gone")])
    b = _write(
        tmp_path / "b.jsonl",
        [_line("/same"), _line("/etag", status=304, etag='"y"'), _line("/new")],
    )
    out: list[str] = []
    assert golden.diff(a, b, out=out.append) == 1
    text = "\n".join(out)
    assert "/same" not in text
    assert "[default] /etag:" in text
    assert "response[0].status: 200 -> 304" in text
    assert """response[0].header etag: ['"x"'] -> ['"y"']""" in text
    assert "/gone: only in a.jsonl" in text
    assert "/new: only in b.jsonl" in text
    assert out[-1] == "3 of 4 requests differ"
    assert golden.diff(a, a, out=out.append) == 0


def test_golden_cli_errors_are_one_line_exit_2(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert _bench("golden", "diff", str(tmp_path / "no.jsonl"), str(tmp_path / "b")) == 2
    assert _bench("golden", "record", str(tmp_path / "x"), "--flag-sets", "nope") == 2
    assert _bench("golden", "record", str(tmp_path / "x"), "--serverio-commit", "no-such") == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 3 and all(line.startswith("golden: ") for line in err)
    assert not (tmp_path / "x").exists()


def _git_checkout() -> bool:
    return shutil.which("git") is not None and (REPO / ".git").exists()


@pytest.mark.skipif(not _git_checkout(), reason="needs a git checkout of serverio")
def test_commit_tree_serverio_is_the_one_python_m_serverio_imports() -> None:
    tree = commits.checkout("HEAD")
    assert tree == commits.checkout("HEAD"), "the export is reused"
    assert tree.parent == commits.cache_dir() and REPO not in tree.parents
    launch = commits.serverio_launch(sys.executable, tree)
    proc = subprocess.run(
        [launch.python, "-c", "import serverio; print(serverio.__file__)"],
        cwd=launch.cwd,
        env={**os.environ, **launch.env},
        capture_output=True,
        text=True,
        check=True,
    )
    # The editable install of this checkout must not win over PYTHONPATH.
    assert Path(proc.stdout.strip()) == tree / "serverio" / "__init__.py"
    with pytest.raises(commits.CommitError):
        commits.resolve("no-such-revision")


@pytest.mark.skipif(not _git_checkout(), reason="needs a git checkout of serverio")
def test_commit_peer_copies_its_model_entry_and_follows_it_in_the_rotation(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    peers = cli.commit_peers(["HEAD", "HEAD=old"], baseline=False, like_name="serverio-pool")
    head = commits.resolve("HEAD")
    assert [p.name for p in peers] == [f"serverio@{head[:7]}", "old"]
    model = SERVERS["serverio-pool"]
    for p in peers:
        assert (p.kind, p.extra_args, p.tags, p.only_workloads) == (
            model.kind,
            model.extra_args,
            model.tags,
            model.only_workloads,
        )
        assert p.commit == head and Path(p.tree) == commits.checkout(head)
    seen: list[list[str]] = []

    def fake_execute(opts: RunOptions) -> int:
        seen.append([s.name for s in opts.servers])
        return 0

    monkeypatch.setattr(cli, "execute", fake_execute)
    assert _bench("run", "--servers", "serverio-inline,bare", "--serverio-commit", "HEAD=old") == 0
    assert seen[-1] == ["serverio-inline", "old", "bare"]
    assert _bench("run", "--servers", "bare", "--baseline") == 0
    assert seen[-1] == ["bare", f"serverio@{commits.resolve(commits.read_baseline())[:7]}"]


def test_baseline_file_names_a_commit(tmp_path: Path) -> None:
    word = commits.read_baseline()
    assert len(word) == 40 and int(word, 16) >= 0
    (tmp_path / "b.txt").write_text("# only a comment\n\n")
    with pytest.raises(commits.CommitError):
        commits.read_baseline(tmp_path / "b.txt")


def test_callgrind_total_is_read_from_the_summary_line(tmp_path: Path) -> None:
    out = tmp_path / "callgrind.out"
    out.write_bytes(b"version: 1\ncmd: python\nevents: Ir\nfl=x\n0 5\nsummary: 123456\n")
    assert callgrind.total_ir(out) == 123456
    out.write_bytes(b"version: 1\nevents: Ir\n")
    with pytest.raises(callgrind.CallgrindError):
        callgrind.total_ir(out)
