"""The agent's deployments in ``deploy/`` (issue 13, defect 7): training nodes rarely run
compose, so the systemd unit and the Kubernetes DaemonSet are what ships their events.

Neither systemd nor a cluster is here: parse the files and check what would otherwise only
fail on a node — the agent restarts for ever, takes its secret from a file, keeps its spool
where it survives the process (or the pod), and is given only settings it reads (a misspelt
variable is silently ignored by the agent). Last, the settings each file gives are fed to the
agent's own parser, so a value it would refuse at start-up fails here.
"""

from __future__ import annotations

import configparser
import shlex
from pathlib import Path, PurePosixPath
from typing import Any
from urllib.parse import urlsplit

import pytest
import yaml

from collector.config import SETTINGS, check_broker_url, config_from_args

ROOT = Path(__file__).resolve().parent.parent
DEPLOY = ROOT / "deploy"
UNIT_PATH = DEPLOY / "systemd" / "ett-collector.service"
ENV_EXAMPLE = DEPLOY / "systemd" / "collector.env.example"
DAEMONSET_PATH = DEPLOY / "kubernetes" / "collector-daemonset.yaml"
#: Where the deployment is explained: the README points there (docs/how-to/run-the-collector.md).
README = (ROOT / "docs" / "how-to" / "run-the-collector.md").read_text()
#: Every variable the agent reads (collector/config.py).
KNOWN_ENV = {setting.env for setting in SETTINGS if setting.env}


# --- systemd ------------------------------------------------------------------------------

class _MultiValue(dict[str, Any]):
    """configparser storage that keeps repeated keys (systemd allows several Environment=
    lines): while reading, configparser stores each value as a list; extend instead of
    replacing it."""

    def __setitem__(self, key: str, value: Any) -> None:
        if isinstance(value, list) and key in self:
            self[key].extend(value)
        else:
            super().__setitem__(key, value)


def _unit() -> configparser.ConfigParser:
    parser = configparser.ConfigParser(strict=False, interpolation=None,
                                       dict_type=_MultiValue, empty_lines_in_values=False)
    parser.optionxform = str  # type: ignore[assignment,method-assign]  # keys are case-sensitive
    parser.read_string(UNIT_PATH.read_text())
    return parser


UNIT = _unit()
SERVICE = UNIT["Service"]


def _unit_environment() -> dict[str, str]:
    """Environment= lines (each may hold several quoted assignments) as a dict."""
    environment: dict[str, str] = {}
    for line in SERVICE.get("Environment", "").splitlines():
        for assignment in shlex.split(line):
            key, sep, value = assignment.partition("=")
            assert sep, f"Environment= entry without '=': {assignment!r}"
            environment[key] = value
    return environment


def _env_file(path: Path) -> dict[str, str]:
    """A systemd EnvironmentFile: KEY=VALUE lines, # comments."""
    values: dict[str, str] = {}
    for line in path.read_text().splitlines():
        if line.strip() and not line.lstrip().startswith("#"):
            key, sep, value = line.partition("=")
            assert sep, f"not KEY=VALUE: {line!r}"
            values[key.strip()] = value.strip()
    return values


UNIT_ENV = _unit_environment()


def test_the_unit_restarts_for_ever() -> None:
    assert SERVICE["Restart"] == "always"
    assert UNIT["Unit"]["StartLimitIntervalSec"] == "0", "systemd gives up after 5 starts"


def test_the_unit_runs_the_agent_from_the_install_path_the_readme_names() -> None:
    argv = shlex.split(SERVICE["ExecStart"])
    python = PurePosixPath(argv[0])
    assert python.is_absolute() and python.name.startswith("python"), argv
    assert argv[1:3] == ["-m", "collector"]
    assert (ROOT / "collector" / "__main__.py").exists()
    venv = str(python.parent.parent)
    assert f"{venv}/bin/pip install" in README, f"README does not say how to install {venv}"


def test_the_unit_takes_its_secret_from_a_file() -> None:
    secret_file = UNIT_ENV["ETT_COLLECTOR_SECRET_FILE"]
    assert PurePosixPath(secret_file).is_absolute()
    assert SERVICE["EnvironmentFile"].lstrip("-") == "/etc/ett/collector.env"
    assert secret_file != SERVICE["EnvironmentFile"]
    env_file = _env_file(ENV_EXAMPLE)
    for given in (UNIT_ENV, env_file):
        assert "ETT_COLLECTOR_SECRET" not in given, "the secret belongs in the file only"
    assert {"ETT_COLLECTOR_ID", "CELERY_BROKER_URL"} <= env_file.keys()
    assert secret_file in README, "README must say where the secret file goes"


def test_the_unit_takes_the_broker_password_from_a_file() -> None:
    password_file = UNIT_ENV["CELERY_BROKER_PASSWORD_FILE"]
    assert PurePosixPath(password_file).is_absolute()
    assert password_file not in (SERVICE["EnvironmentFile"].lstrip("-"),
                                 UNIT_ENV["ETT_COLLECTOR_SECRET_FILE"])
    env_file = _env_file(ENV_EXAMPLE)
    for given in (UNIT_ENV, env_file):
        assert "CELERY_BROKER_PASSWORD" not in given, "the password belongs in the file only"
    assert urlsplit(env_file["CELERY_BROKER_URL"]).password is None
    assert password_file in README, "README must say where the password file goes"


def test_the_spool_is_the_units_state_directory() -> None:
    """StateDirectory= is created (owned by User=) at every start and, under
    ProtectSystem=strict, is the one path the agent may write: its spool and its state."""
    assert UNIT_ENV["ETT_SPOOL_DIR"] == f"/var/lib/{SERVICE['StateDirectory']}"
    assert "ETT_COLLECTOR_STATE" not in UNIT_ENV, "the state file must stay in the spool"


def test_the_unit_stops_gracefully_as_a_dedicated_user_with_hardening() -> None:
    assert SERVICE.get("KillSignal", "SIGTERM") == "SIGTERM"
    assert int(SERVICE["TimeoutStopSec"]) >= 30
    assert SERVICE["User"] not in ("", "root", "0")
    assert SERVICE.get("DynamicUser", "no") == "no", "the trainers share the spool's group"
    assert SERVICE["NoNewPrivileges"] == "yes"
    assert SERVICE["ProtectSystem"] == "strict"
    assert SERVICE["PrivateTmp"] == "yes"


def test_the_unit_and_its_env_file_give_only_settings_the_agent_reads() -> None:
    given = set(UNIT_ENV) | set(_env_file(ENV_EXAMPLE))
    assert given <= KNOWN_ENV, given - KNOWN_ENV
    check_broker_url(_env_file(ENV_EXAMPLE)["CELERY_BROKER_URL"])


def test_the_units_settings_start_the_agent_signing(tmp_path: Path) -> None:
    secret = tmp_path / "collector.secret"
    secret.write_text("ab" * 32 + "\n")
    password = tmp_path / "broker.password"
    password.write_text("s3cret\n")
    environ = {**UNIT_ENV, **_env_file(ENV_EXAMPLE), "ETT_COLLECTOR_SECRET_FILE": str(secret),
               "CELERY_BROKER_PASSWORD_FILE": str(password)}
    config = config_from_args([], environ)
    assert config.collector_id == _env_file(ENV_EXAMPLE)["ETT_COLLECTOR_ID"]
    assert config.collector_secret == "ab" * 32
    assert config.broker_password == "s3cret"
    assert str(config.spool_dir) == UNIT_ENV["ETT_SPOOL_DIR"]
    assert config.state_file.parent == config.spool_dir


# --- Kubernetes ---------------------------------------------------------------------------

DOCUMENTS = list(yaml.safe_load_all(DAEMONSET_PATH.read_text()))


def _example_secret() -> dict[str, Any]:
    """The Secret's shape, kept as a comment in the manifest (between the two markers)."""
    text = DAEMONSET_PATH.read_text()
    block = text.split("# secret-example-begin\n")[1].split("# secret-example-end\n")[0]
    loaded: dict[str, Any] = yaml.safe_load(
        "\n".join(line.removeprefix("#").removeprefix(" ") for line in block.splitlines()))
    return loaded


SECRET = _example_secret()
(DAEMONSET,) = DOCUMENTS
POD: dict[str, Any] = DAEMONSET["spec"]["template"]["spec"]
(CONTAINER,) = [c for c in POD["containers"] if c["name"] == "collector"]
ENV: dict[str, dict[str, Any]] = {entry["name"]: entry for entry in CONTAINER["env"]}
VOLUMES: dict[str, dict[str, Any]] = {volume["name"]: volume for volume in POD["volumes"]}


def _mount_of(path: str) -> tuple[dict[str, Any], dict[str, Any], str]:
    """(volumeMount, volume, path inside the volume) of a file in the collector container."""
    for mount in CONTAINER["volumeMounts"]:
        root = mount["mountPath"].rstrip("/")
        if path == root or path.startswith(root + "/"):
            return mount, VOLUMES[mount["name"]], path[len(root) + 1:]
    pytest.fail(f"{path} is on no volume of the collector container")


def test_the_manifest_is_one_daemonset_and_applying_it_never_overwrites_a_secret() -> None:
    assert len(DOCUMENTS) == 1
    assert (DAEMONSET["apiVersion"], DAEMONSET["kind"]) == ("apps/v1", "DaemonSet")
    labels = DAEMONSET["spec"]["template"]["metadata"]["labels"]
    assert DAEMONSET["spec"]["selector"]["matchLabels"].items() <= labels.items()
    assert SECRET["kind"] == "Secret"
    assert SECRET["metadata"]["namespace"] == DAEMONSET["metadata"]["namespace"]


def test_the_pod_runs_the_agent_and_restarts_it() -> None:
    assert CONTAINER["command"][:3] == ["python", "-m", "collector"]
    assert POD["restartPolicy"] == "Always"
    assert POD["terminationGracePeriodSeconds"] >= 30


@pytest.mark.parametrize("variable", ["ETT_COLLECTOR_SECRET", "CELERY_BROKER_PASSWORD"])
def test_the_secrets_come_from_a_read_only_secret_volume(variable: str) -> None:
    secret_file = ENV[f"{variable}_FILE"]["value"]
    mount, volume, inside = _mount_of(secret_file)
    assert mount.get("readOnly") is True
    assert volume["secret"]["secretName"] == SECRET["metadata"]["name"]
    items = {item["path"]: item["key"] for item in volume["secret"].get("items", [])}
    key = items.get(inside, inside if not items else None)
    assert key in SECRET["stringData"], f"{inside} is no key of the Secret"
    assert variable not in ENV, "the secret belongs in the file only"


def test_the_id_and_broker_come_from_the_secret() -> None:
    for variable in ("ETT_COLLECTOR_ID", "CELERY_BROKER_URL"):
        ref = ENV[variable]["valueFrom"]["secretKeyRef"]
        assert ref["name"] == SECRET["metadata"]["name"]
        assert ref["key"] in SECRET["stringData"]


def test_the_spool_is_a_host_directory_that_survives_the_pod() -> None:
    spool_dir = ENV["ETT_SPOOL_DIR"]["value"]
    mount, volume, inside = _mount_of(spool_dir)
    assert inside == "" and mount["mountPath"] == spool_dir
    assert not mount.get("readOnly"), "the agent writes its state and deletes shipped files"
    assert volume["hostPath"]["type"] == "DirectoryOrCreate"
    assert PurePosixPath(volume["hostPath"]["path"]).is_absolute()
    assert "ETT_COLLECTOR_STATE" not in ENV, "the state file must stay in the spool"


def test_the_agent_runs_as_the_images_user_and_owns_the_spool() -> None:
    pod_ctx = POD.get("securityContext", {})
    ctx = {**pod_ctx, **CONTAINER.get("securityContext", {})}
    assert ctx["runAsNonRoot"] is True
    assert ctx["runAsUser"] == 1000, "the Dockerfile's ett user"
    assert pod_ctx["fsGroup"] == ctx["runAsUser"]
    assert ctx["allowPrivilegeEscalation"] is False
    # The kubelet creates a missing hostPath as root: an init container hands it over.
    spool = _mount_of(ENV["ETT_SPOOL_DIR"]["value"])[0]["name"]
    (init,) = [c for c in POD.get("initContainers", [])
               if spool in {m["name"] for m in c.get("volumeMounts", [])}]
    init_mount = next(m["mountPath"] for m in init["volumeMounts"] if m["name"] == spool)
    assert f"chown {ctx['runAsUser']}:" in " ".join(init["command"])
    assert init_mount in " ".join(init["command"])


def test_the_pod_has_resources_and_a_reachable_metrics_port() -> None:
    resources = CONTAINER["resources"]
    for kind in ("requests", "limits"):
        assert {"cpu", "memory"} <= resources[kind].keys()
    port = int(ENV["ETT_METRICS_PORT"]["value"])
    assert port in {p["containerPort"] for p in CONTAINER["ports"]}
    assert ENV["ETT_METRICS_HOST"]["value"] == "0.0.0.0", "127.0.0.1 is unreachable off-pod"


def test_the_daemonset_gives_only_settings_the_agent_reads() -> None:
    assert set(ENV) <= KNOWN_ENV, set(ENV) - KNOWN_ENV
    source = ENV["ETT_SOURCE"]["valueFrom"]["fieldRef"]["fieldPath"]
    assert source == "spec.nodeName", "one source per node, not per pod"


def test_the_daemonsets_settings_start_the_agent_signing(tmp_path: Path) -> None:
    """Resolve the env as the kubelet would (Secret keys from the example) and parse it."""
    environ: dict[str, str] = {}
    for name, entry in ENV.items():
        if "value" in entry:
            environ[name] = str(entry["value"])
        elif "secretKeyRef" in entry["valueFrom"]:
            environ[name] = SECRET["stringData"][entry["valueFrom"]["secretKeyRef"]["key"]]
        else:
            environ[name] = "node-1"
    keys = {i["path"]: i["key"] for i in VOLUMES["credentials"]["secret"]["items"]}
    for variable in ("ETT_COLLECTOR_SECRET_FILE", "CELERY_BROKER_PASSWORD_FILE"):
        key = keys[_mount_of(environ[variable])[2]]
        (tmp_path / key).write_text(SECRET["stringData"][key])
        environ[variable] = str(tmp_path / key)
    config = config_from_args([], environ)
    assert config.collector_id == SECRET["stringData"]["collector-id"]
    assert config.collector_secret == SECRET["stringData"]["collector-secret"]
    assert config.broker_password == SECRET["stringData"]["broker-password"]
    assert urlsplit(config.broker_url).password is None
    assert str(config.spool_dir) == ENV["ETT_SPOOL_DIR"]["value"]
    assert (config.source, config.metrics_port) == ("node-1", 9464)
