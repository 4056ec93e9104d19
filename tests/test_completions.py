"""``serverio completions SHELL`` and ``serverio manpage`` (issue 28).

Both are generated from the option declarations; the tests compare them
with the parser ``--help`` is printed from (an independent listing of the
flags), run each script through its shell's syntax check and, where the
shell is installed, ask the shell itself what it completes.
"""

from __future__ import annotations

import argparse
import shutil
import subprocess
from pathlib import Path

import pytest

from serverio.ops.cli import build_parser, main
from serverio.ops.completions import SHELLS, completion_script, flags_of, value_kind
from serverio.ops.manpage import manpage, roff_text
from serverio.ops.options import OPTIONS, Option, by_dest, env_names

HAVE = {name: shutil.which(name) for name in ("bash", "zsh", "fish", "groff", "man")}


def _parser_flags() -> set[str]:
    """Every option string of the parser --help is made from."""
    parser = build_parser()
    return {s for a in parser._actions for s in a.option_strings}


def _need(tool: str) -> str:
    path = HAVE[tool]
    if path is None:
        pytest.skip(f"{tool} is not installed")
    return path


# A declaration no generator has heard of: it must appear everywhere.
NEW = Option(
    "directory",
    ("--brand-new-option",),
    "a .leading dot, a back\\slash, 'quotes', [brackets]: and \u00e9",
    "Files",
    metavar="FILE",
)


@pytest.mark.parametrize("shell", SHELLS)
def test_every_option_of_the_parser_is_in_each_script(shell: str) -> None:
    script = completion_script(shell)
    flags = _parser_flags()
    assert len(flags) > 60
    # fish spells a flag as "-l name" / "-s x"; bash and zsh as written.
    missing = (
        [
            f
            for f in flags
            if (f"-l {f[2:]} " if f.startswith("--") else f"-s {f[1:]} ") not in script
        ]
        if shell == "fish"
        else [f for f in flags if f not in script]
    )
    assert not missing, f"{shell}: {missing}"
    for sub in ("hash-password", "completions", "manpage"):
        assert sub in script


def test_values_complete_from_the_declarations() -> None:
    kinds = {f: value_kind(o) for o in OPTIONS if o.kind != "positional" for f in o.flags}
    assert kinds["--etag"] == "choices"
    assert kinds["--directory"] == "dir"
    assert kinds["--tls-cert"] == kinds["--auth-file"] == kinds["--config"] == "file"
    assert kinds["--max-connections"] == "value"
    assert kinds["--no-http2"] == kinds["--hidden"] == "none"
    toggle = next(f for f in flags_of() if "--http2" in f.flags)
    assert toggle.excludes == ("--http2", "--no-http2")


@pytest.mark.parametrize("shell", SHELLS)
def test_a_new_option_appears_without_editing_the_generators(shell: str) -> None:
    script = completion_script(shell, (*OPTIONS, NEW))
    assert "brand-new-option" in script
    assert "brand-new-option" not in completion_script(shell)
    page = manpage(description="d", version="v", options=(*OPTIONS, NEW))
    assert "\\-\\-brand\\-new\\-option" in page


def test_an_unquotable_choice_is_refused_at_generation() -> None:
    bad = Option(None, ("--x",), "x", "Files", choices=("ok", "a'b"), toml=False)
    with pytest.raises(ValueError, match="not a plain word"):
        completion_script("bash", (bad,))


def _syntax(shell: str, script: str, tmp_path: Path) -> subprocess.CompletedProcess[str]:
    path = tmp_path / f"serverio.{shell}"
    path.write_text(script)
    check = {"bash": ["-n"], "zsh": ["-n"], "fish": ["--no-execute"]}[shell]
    return subprocess.run(
        [_need(shell), *check, str(path)], capture_output=True, text=True, timeout=30
    )


@pytest.mark.parametrize("shell", SHELLS)
def test_each_script_passes_its_shell_syntax_check(shell: str, tmp_path: Path) -> None:
    for options in (OPTIONS, (*OPTIONS, NEW)):
        r = _syntax(shell, completion_script(shell, options), tmp_path)
        assert r.returncode == 0 and not r.stderr, r.stderr


def test_the_syntax_check_can_fail(tmp_path: Path) -> None:
    # The check above is not vacuous: a broken script is caught.
    broken = completion_script("bash").replace("esac", "", 1)
    assert _syntax("bash", broken, tmp_path).returncode != 0


def _bash_complete(script: Path, *words: str) -> list[str]:
    cword = len(words) - 1
    words_text = " ".join(f"'{w}'" for w in words)
    code = (
        f"source {script}; COMP_WORDS=({words_text}); COMP_CWORD={cword}; _serverio; "
        'printf "%s\\n" "${COMPREPLY[@]}"'
    )
    r = subprocess.run(
        [_need("bash"), "--norc", "-c", code], capture_output=True, text=True, timeout=30
    )
    assert r.returncode == 0, r.stderr
    return [w for w in r.stdout.splitlines() if w]


def test_bash_completes_flags_choices_paths_and_subcommands(tmp_path: Path) -> None:
    script = tmp_path / "serverio.bash"
    script.write_text(completion_script("bash"))
    (tmp_path / "cert.pem").touch()
    (tmp_path / "certdir").mkdir()
    assert _bash_complete(script, "serverio", "--max-con") == ["--max-connections"]
    assert _bash_complete(script, "serverio", "--etag", "") == ["auto", "content"]
    assert _bash_complete(script, "serverio", "--max-connections", "") == []
    assert _bash_complete(script, "serverio", "comp") == ["completions"]
    assert _bash_complete(script, "serverio", "completions", "") == ["bash", "zsh", "fish"]
    assert _bash_complete(script, "serverio", "hash-password", "--u") == ["--user"]
    cert = str(tmp_path / "cert")
    files = _bash_complete(script, "serverio", "--certfile", cert)
    assert sorted(files) == [cert + ".pem", cert + "dir"]
    assert _bash_complete(script, "serverio", "-d", cert) == [cert + "dir"]


def test_fish_completes_flags_choices_and_subcommands(tmp_path: Path) -> None:
    script = tmp_path / "serverio.fish"
    script.write_text(completion_script("fish"))

    def complete(line: str) -> list[str]:
        r = subprocess.run(
            [_need("fish"), "--no-config", "-c", f"source {script}; complete -C {line!r}"],
            capture_output=True,
            text=True,
            timeout=30,
        )
        assert r.returncode == 0 and not r.stderr, r.stderr
        return [ln.split("\t")[0] for ln in r.stdout.splitlines()]

    assert complete("serverio --max-con") == ["--max-connections"]
    assert complete("serverio --etag ") == ["auto", "content"]
    assert complete("serverio completions ") == sorted(SHELLS)
    assert "--iterations" in complete("serverio hash-password --")
    # The main command's options are not offered after a subcommand.
    assert "--max-connections" not in complete("serverio hash-password --")


def test_zsh_loads_the_script_under_compinit(tmp_path: Path) -> None:
    script = tmp_path / "_serverio"
    script.write_text(completion_script("zsh"))
    code = (
        f"autoload -U compinit; compinit -u -d {tmp_path}/zcompdump; source {script}; "
        "print -r -- $_comps[serverio]"
    )
    r = subprocess.run([_need("zsh"), "-f", "-c", code], capture_output=True, text=True, timeout=30)
    assert r.returncode == 0 and not r.stderr, r.stderr
    assert r.stdout.strip() == "_serverio"


# ---------------------------------------------------------------- man page


def _page() -> str:
    return manpage(description=build_parser().description or "", version="serverio 0")


def test_the_man_page_names_every_option_and_group() -> None:
    page = _page()
    for flag in _parser_flags():
        assert roff_text(flag).replace("-", "\\-") in page, flag
    for opt in OPTIONS:
        assert opt.group in page
    assert page.startswith('.\\"') and "\n.TH SERVERIO 1 " in page
    for section in ("NAME", "SYNOPSIS", "DESCRIPTION", "OPTIONS", "SUBCOMMANDS", "EXIT STATUS"):
        assert f"\n.SH {section}\n" in page


def test_the_man_page_lists_every_environment_variable_and_exit_status() -> None:
    page = _page()
    env = page.split("\n.SH ENVIRONMENT\n", 1)[1].split("\n.SH ", 1)[0]
    for name in env_names():  # what env_values and port_from_env really read
        assert f"\n\\fB{name}\\fR\n" in env, name
    assert "command line > environment > --config file > PORT (the port only) > default" in env
    # Derived, not listed: a new option's variable appears without editing the page.
    new = manpage(description="d", version="v", options=(*OPTIONS, NEW))
    assert "SERVERIO_BRAND_NEW_OPTION" in new
    statuses = page.split("\n.SH EXIT STATUS\n", 1)[1].split("\n.SH ", 1)[0]
    assert [ln for ln in statuses.splitlines() if ln.startswith("\\fB")] == [
        "\\fB0\\fR", "\\fB1\\fR", "\\fB2\\fR", "\\fB3\\fR",
    ]  # fmt: skip
    assert "address already in use" in statuses


def test_roff_text_escapes_requests_backslashes_and_non_ascii() -> None:
    assert roff_text(".TH x") == "\\&.TH x"
    assert roff_text("'x\n.y") == "\\&'x\n\\&.y"
    assert roff_text("a\\b") == "a\\eb"
    assert roff_text("\u00e9\u2014") == "\\[u00E9]\\[u2014]"
    page = manpage(description="d", version="v", options=(*OPTIONS, NEW))
    assert all(ord(c) < 0x80 for c in page)
    # No line of the page is a request it did not mean to write.
    requests = {ln.split()[0] for ln in page.splitlines() if ln[:1] in (".", "'")}
    assert requests <= {'.\\"', ".TH", ".SH", ".SS", ".TP", ".B", ".br", ".RS", ".RE", ".nh", ".ad"}


def test_groff_renders_the_page_without_warnings(tmp_path: Path) -> None:
    groff = _need("groff")
    for options in (OPTIONS, (*OPTIONS, NEW)):
        source = manpage(description="d", version="v", options=options)
        r = subprocess.run(
            [groff, "-man", "-Tutf8", "-ww", "-z"],
            input=source,
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert r.returncode == 0 and r.stderr == "", r.stderr
    shown = subprocess.run(
        [groff, "-man", "-Tascii", "-P-cbou"],
        input=_page(),
        capture_output=True,
        text=True,
        timeout=60,
    ).stdout
    for flag in ("--max-connections", "--no-http2", "--tls-password-file", "hash-password"):
        assert flag in shown


def test_man_l_renders_the_page(tmp_path: Path) -> None:
    path = tmp_path / "serverio.1"
    path.write_text(_page())
    r = subprocess.run(
        [_need("man"), "-l", str(path)],
        capture_output=True,
        text=True,
        timeout=60,
        env={"MANWIDTH": "80", "PATH": "/usr/bin:/bin", "LANG": "C.UTF-8"},
    )
    assert r.returncode == 0 and r.stderr == "", r.stderr
    assert "SERVERIO(1)" in r.stdout and "--max-connections" in r.stdout.replace("\u2010", "-")


# ---------------------------------------------------------------- the subcommands


def test_the_subcommands_print_and_refuse(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["completions", "bash"]) == 0
    assert "complete -F _serverio serverio" in capsys.readouterr().out
    assert main(["manpage"]) == 0
    out = capsys.readouterr().out
    assert out.startswith('.\\"') and (build_parser().description or "")[:20] in out
    for argv in (["completions"], ["completions", "tcsh"], ["completions", "bash", "zsh"]):
        assert main(argv) == 2
        err = capsys.readouterr().err
        assert err.startswith("serverio: error: completions") and err.count("\n") == 1
    assert main(["manpage", "extra"]) == 2
    assert capsys.readouterr().err.count("\n") == 1


def test_a_port_is_still_a_port() -> None:
    # The subcommands are words no port can be; the first positional stays the port.
    parser = build_parser()
    assert isinstance(parser, argparse.ArgumentParser)
    assert parser.parse_args(["8080"]).port == 8080
    assert by_dest("port") is not None
