"""Config as narrow policy objects (issue 26 item 5): each setting is one
field of one policy, each policy small, and every setting declared once."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from serverio.config import (
    FIELD_GROUP,
    POLICIES,
    Config,
    ConnectionPolicy,
    FilesPolicy,
    ListenPolicy,
    SitePolicy,
    WatchPolicy,
    field_path,
)
from serverio.errors import ConfigError
from serverio.ops.options import DEFAULTS, NOT_SETTABLE, OPTIONS, TABLES

# The gate of issue 26: no class over 20 attributes, dataclass fields included.
MAX_FIELDS = 20


@pytest.mark.parametrize("cls", [Config, *POLICIES.values()], ids=lambda c: c.__name__)
def test_each_policy_is_small_and_frozen(cls: type) -> None:
    fields = dataclasses.fields(cls)
    assert 0 < len(fields) <= MAX_FIELDS, (cls.__name__, len(fields))
    params = cls.__dataclass_params__  # type: ignore[attr-defined]
    assert params.frozen, cls.__name__


def test_config_holds_the_policies_and_the_root_fields_only() -> None:
    own = [f.name for f in dataclasses.fields(Config) if f.name not in POLICIES]
    assert own == ["directory", "root", "source_date_epoch"]
    assert len(POLICIES) == 14
    for group, cls in POLICIES.items():
        assert isinstance(getattr(Config(), group), cls), group


def test_every_setting_is_one_field_of_one_policy() -> None:
    seen: dict[str, str] = {}
    for group, cls in POLICIES.items():
        for f in dataclasses.fields(cls):
            assert f.name not in seen, f"{f.name} in {seen.get(f.name)} and {group}"
            seen[f.name] = group
    own = {f.name: "" for f in dataclasses.fields(Config) if f.name not in POLICIES}
    assert FIELD_GROUP == {**own, **seen}


def test_every_option_maps_to_exactly_one_policy_field() -> None:
    paths = [o.path for o in OPTIONS if o.field is not None]
    assert len(paths) == len(set(paths))
    for opt in OPTIONS:
        if opt.field is None:
            assert opt.path is None
            continue
        assert opt.path is not None
        group, _, name = opt.path.rpartition(".")
        holder = getattr(Config(), group) if group else Config()
        assert name == opt.field and hasattr(holder, name), opt.flags
        # The default shown and parsed is the policy field's own.
        if opt.default_factory is None:
            assert DEFAULTS[opt.field] == getattr(holder, name), opt.flags


def test_every_settable_field_has_an_option_a_table_or_a_reason() -> None:
    declared = [o.field for o in OPTIONS if o.field is not None] + [t.field for t in TABLES]
    assert sorted(declared) == sorted(set(declared))
    assert set(declared).isdisjoint(NOT_SETTABLE)
    assert set(declared) | set(NOT_SETTABLE) == set(FIELD_GROUP)


def test_of_routes_each_setting_to_its_policy() -> None:
    cfg = Config.of(port=0, index=("a.html",), max_requests=3, cors=True, directory="/srv")
    assert cfg.listeners == ListenPolicy(port=0)
    assert cfg.files == FilesPolicy(index=("a.html",))
    assert cfg.conn == ConnectionPolicy(max_requests=3)
    assert cfg.site == SitePolicy(cors=True)
    assert cfg.directory == "/srv"
    assert cfg.live == WatchPolicy()  # untouched policies stay the defaults
    assert cfg.value("max_requests") == 3 and cfg.value("directory") == "/srv"
    assert field_path("max_requests") == "conn.max_requests"
    assert field_path("directory") == "directory"


def test_evolve_changes_only_the_named_settings() -> None:
    base = Config.of(port=1, host="::1")
    cfg = base.evolve(port=2, sendfile=False)
    assert (cfg.listeners.port, cfg.listeners.host, cfg.files.sendfile) == (2, "::1", False)
    assert base.listeners.port == 1 and base.files.sendfile  # frozen: a copy
    with pytest.raises(dataclasses.FrozenInstanceError):
        cfg.listeners.port = 3  # type: ignore[misc]


def test_unknown_settings_are_refused() -> None:
    with pytest.raises(TypeError, match="'prot'"):
        Config.of(prot=1)
    with pytest.raises(TypeError, match="'files'"):
        Config().evolve(files=FilesPolicy())  # a policy is no setting: replace it whole
    with pytest.raises(AttributeError, match="'nope'"):
        Config().value("nope")


def test_each_policy_validates_itself() -> None:
    """The messages name the option, as Config.validate's always did."""
    with pytest.raises(ConfigError, match=r"^--max-requests must be an integer >= 1, got 0$"):
        ConnectionPolicy(max_requests=0).validate()
    with pytest.raises(ConfigError, match=r"^--index 'a/b' must be a plain file name$"):
        FilesPolicy(index=("a/b",)).validate()
    with pytest.raises(ConfigError, match=r"^--port must be from 0 to 65535, got 70000$"):
        ListenPolicy(port=70000).validate()
    with pytest.raises(ConfigError, match=r"^--trusted-proxies: "):
        SitePolicy(trusted_proxies=("x",)).validate()
    assert SitePolicy(trusted_proxies=("10.0.0.1/8",)).validate().proxy_networks[0].prefixlen == 8


def test_validate_checks_every_policy_and_the_rules_between_them(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"^--watch-max-streams must be an integer >= 1"):
        Config.of(directory=str(tmp_path), watch_max_streams=0).validate()
    with pytest.raises(ConfigError, match=r"^--listen-tls needs --certfile$"):
        Config.of(directory=str(tmp_path), listen_tls=("127.0.0.1:8443",)).validate()
    cfg = Config.of(directory=str(tmp_path), trusted_proxies=("192.0.2.1",)).validate()
    assert cfg.root == str(tmp_path.resolve())
    assert [str(n) for n in cfg.site.proxy_networks] == ["192.0.2.1/32"]
    # Derived fields do not take part in equality: validated == declared.
    assert cfg == Config.of(directory=str(tmp_path), trusted_proxies=("192.0.2.1",))
