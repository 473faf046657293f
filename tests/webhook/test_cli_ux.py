"""What a user sees at the command line: exit status and the one line on stderr (issue 13)."""

from __future__ import annotations

import io
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from webhook.cli import main
from webhook.commands._common import Progress

pytestmark = pytest.mark.usefixtures("no_machine_kubeconfig")

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = ROOT / "manifests" / "examples"
STATE = EXAMPLES / "cluster"
WORKLOADS = EXAMPLES / "workloads"
LATIN1 = "kind: Pod\nmetadata: {name: caf\xe9}\n".encode("latin-1")
BINARY = b"\x7fELF\x02\x01\x01\x00\x00\x00\xff\xfe\x00"


def _run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def _queue(nominal: Any = 4, **spec: Any) -> dict[str, Any]:
    return {
        "apiVersion": "draquota.io/v1beta1",
        "kind": "ClusterQueue",
        "metadata": {"name": "q"},
        "spec": {
            "namespaceSelector": {},
            "resourceGroups": [
                {
                    "coveredResources": ["gpus"],
                    "flavors": [
                        {
                            "name": "default",
                            "resources": [
                                {
                                    "name": "gpus",
                                    "kind": "DeviceClass",
                                    "deviceClassNames": ["gpu.example.com"],
                                    "nominalQuota": nominal,
                                }
                            ],
                        }
                    ],
                }
            ],
            **spec,
        },
    }


FLAVOR = {
    "apiVersion": "draquota.io/v1beta1",
    "kind": "ResourceFlavor",
    "metadata": {"name": "default"},
}


# -- 1. files that are not UTF-8 text ------------------------------------------------------


@pytest.mark.parametrize("data", [LATIN1, BINARY], ids=["latin-1", "binary"])
@pytest.mark.parametrize("where", ["input", "state", "config", "serve-state"])
def test_non_utf8_file_is_bad_input_naming_the_file(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], data: bytes, where: str
) -> None:
    bad = tmp_path / "dir" / "bad.yaml"
    bad.parent.mkdir()
    bad.write_bytes(data)
    good = WORKLOADS / "01-admit.yaml"
    argv = {
        "input": ["count", str(bad)],
        "state": ["check", str(good), "--state", str(bad.parent)],
        "config": ["check", str(good), "--config", str(bad)],
        "serve-state": ["serve", "--state", str(bad.parent), "--port", "1"],
    }[where]
    code, out, err = _run(capsys, *argv)
    assert code == 2
    assert out == ""
    assert err.startswith(f"draquota {argv[0]}: {bad}: not a UTF-8 text file (byte 0x")
    assert err.count("\n") == 1


# -- 2. allocate: per pod, per file, or --together -----------------------------------------


def _claim_file(path: Path, name: str, count: int) -> Path:
    claim = {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaim",
        "metadata": {"name": name, "namespace": "team-a"},
        "spec": {
            "devices": {
                "requests": [
                    {
                        "name": "gpu",
                        "exactly": {"deviceClassName": "gpu.example.com", "count": count},
                    }
                ]
            }
        },
    }
    path.write_text(yaml.safe_dump(claim))
    return path


def test_allocate_places_files_separately_and_together_on_request(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # Every example node has 8 GPUs: 5 + 5 fit one at a time, never as one pod.
    a = _claim_file(tmp_path / "a.yaml", "five-a", 5)
    b = _claim_file(tmp_path / "b.yaml", "five-b", 5)
    code, out, err = _run(capsys, "allocate", str(a), str(b), "--state", str(STATE), "-o", "json")
    assert code == 0
    items = json.loads(out)["items"]
    assert [(i["group"], i["name"], i["ok"]) for i in items] == [
        (str(a), "five-a", True),
        (str(b), "five-b", True),
    ]
    code, out, err = _run(capsys, "allocate", str(a), str(b), "--state", str(STATE), "--together")
    assert code == 0
    assert "1 group(s): all claims placed together as one pod (--together)" in err
    rows = [line.split() for line in out.splitlines()[1:]]
    assert [(r[0], r[2], r[3]) for r in rows] == [("all", "five-a", "no"), ("all", "five-b", "no")]


def test_allocate_example_workloads_each_pod_on_its_own(
    capsys: pytest.CaptureFixture[str],
) -> None:
    files = sorted(map(str, WORKLOADS.glob("*.yaml")))
    code, out, err = _run(capsys, "allocate", *files, "--state", str(STATE), "-o", "json")
    assert (code, err) == (0, "")
    items = json.loads(out)["items"]
    # Only the pod whose claim no node can host fails, with its own reason.
    failed = [(i["group"], i["reason"]) for i in items if not i["ok"]]
    assert len(failed) == 1
    assert failed[0][0] == "pod/allreduce-0"
    assert "five-gpus-one-root" in failed[0][1]
    assert len({i["group"] for i in items}) == len(items)


# -- 3. a quota setup checked without a pod --------------------------------------------------


def test_check_of_an_invalid_queue_without_pods_exits_2(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "q.yaml"
    path.write_text(yaml.safe_dump_all([_queue(-4), FLAVOR]))
    code, out, err = _run(capsys, "check", str(path))
    assert (code, out) == (2, "")
    assert err.startswith("draquota check: ClusterQueue q: ")
    assert "nominalQuota" in err


def test_status_shows_quota_and_usage_per_queue_flavor_and_resource(
    capsys: pytest.CaptureFixture[str],
) -> None:
    code, out, err = _run(capsys, "status", "--state", str(STATE))
    assert (code, err) == (0, "")
    header, *rows = [line.split() for line in out.splitlines()]
    assert header[:5] == ["CLUSTERQUEUE", "COHORT", "ACTIVE", "FLAVOR", "RESOURCE"]
    by_key = {(r[0], r[3], r[4]): r[5:] for r in rows}
    # team-a: the running pods hold 3 on-demand GPUs of a nominal 4; none borrowed
    assert by_key[("team-a", "on-demand", "gpus")] == ["4", "3", "0", "1"]
    code, out, _ = _run(capsys, "status", "--state", str(STATE), "-o", "json")
    items = json.loads(out)["items"]
    assert [(i["name"], i["active"]) for i in items] == [("team-a", True), ("team-b", True)]


def test_status_reports_an_invalid_queue_and_exits_2(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "q.yaml").write_text(yaml.safe_dump_all([_queue(cohrot="research"), FLAVOR]))
    code, out, err = _run(capsys, "status", "--state", str(tmp_path))
    assert code == 2
    assert out.splitlines()[1].split()[:3] == ["q", "-", "False"]
    assert err == (
        'draquota status: ClusterQueue q: spec.cohrot: unknown field (did you mean "cohort"?)\n'
    )


# -- 4. strict decoding at the command line ------------------------------------------------


def test_config_with_an_unknown_field_exits_2_naming_file_and_path(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    config = tmp_path / "config.yaml"
    config.write_text("unmappedDeviceClas: Ignore\n")
    code, _, err = _run(capsys, "check", str(WORKLOADS / "01-admit.yaml"), "--config", str(config))
    assert code == 2
    assert err == (
        f"draquota check: {config}: unmappedDeviceClas: unknown field "
        '(did you mean "unmappedDeviceClass"?)\n'
    )


# -- 5. progress on a terminal only --------------------------------------------------------


class _Terminal(io.StringIO):
    def __init__(self, tty: bool) -> None:
        super().__init__()
        self.tty = tty

    def isatty(self) -> bool:
        return self.tty


@pytest.mark.parametrize(
    ("tty", "elapsed", "shown"), [(True, 3, True), (True, 1, False), (False, 3, False)]
)
def test_progress_line_only_on_a_terminal_for_slow_inputs(
    tty: bool, elapsed: float, shown: bool
) -> None:
    now = [0.0]
    stream = _Terminal(tty)
    progress = Progress("count", stream, after=2.0, clock=lambda: now[0])
    now[0] = elapsed
    progress.file_read(Path("big.yaml"), 32_000)
    assert ("draquota count: read 1 files, 32000 objects" in stream.getvalue()) == shown
    progress.done()
    assert stream.getvalue().endswith("\r\x1b[K") == shown


# -- 6. kubectl conventions ------------------------------------------------------------------


def test_output_formats(capsys: pytest.CaptureFixture[str]) -> None:
    file = str(WORKLOADS / "01-admit.yaml")
    code, out, _ = _run(capsys, "count", file, "--state", str(STATE), "-o", "yaml")
    assert code == 0
    assert yaml.safe_load(out)["items"][0]["devices"] == {"gpu.example.com": 1}
    assert _run(capsys, "count", file, "--state", str(STATE), "-o", "name")[1] == "pod/train-0\n"
    wide = _run(capsys, "check", file, "--state", str(STATE), "-o", "wide")[1]
    assert wide.splitlines()[0].split()[-3:] == ["NODE", "SELECTOR", "MESSAGE"]
    assert (
        _run(capsys, "count", file, "--state", str(STATE), "--json")[1]
        == _run(capsys, "count", file, "--state", str(STATE), "-o", "json")[1]
        != ""
    )


def test_version_stdin_directories_and_recursion(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    with pytest.raises(SystemExit) as info:
        main(["--version"])
    assert info.value.code == 0
    assert capsys.readouterr().out.startswith("draquota ")

    monkeypatch.setattr(
        sys, "stdin", io.TextIOWrapper(io.BytesIO((WORKLOADS / "01-admit.yaml").read_bytes()))
    )
    assert _run(capsys, "count", "-", "--state", str(STATE), "-o", "name")[1] == "pod/train-0\n"

    nested = tmp_path / "a" / "b"
    nested.mkdir(parents=True)
    (tmp_path / "a" / "top.yaml").write_bytes((WORKLOADS / "01-admit.yaml").read_bytes())
    (nested / "deep.json").write_text(
        json.dumps(yaml.safe_load((WORKLOADS / "09-not-managed.yaml").read_text()))
    )
    assert (
        _run(capsys, "count", str(tmp_path / "a"), "--state", str(STATE), "-o", "name")[1]
        == "pod/train-0\n"
    )
    names = _run(capsys, "count", str(tmp_path / "a"), "-R", "--state", str(STATE), "-o", "name")[
        1
    ].split()
    assert names == ["pod/hello", "pod/train-0"]


def test_bash_completion_script_is_valid_and_knows_the_commands() -> None:
    script = subprocess.run(
        [sys.executable, "-m", "webhook.cli", "completion", "bash"],
        capture_output=True,
        text=True,
        check=True,
        cwd=ROOT,
    ).stdout
    assert "status" in script and "--together" in script
    subprocess.run(["bash", "-n"], input=script, text=True, check=True)


# -- 8. placement skipped without ResourceSlices says so -------------------------------------


def test_check_without_resource_slices_says_placement_was_not_checked(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    for path in STATE.glob("*.yaml"):
        if path.name != "resourceslices.yaml":
            (tmp_path / path.name).write_bytes(path.read_bytes())
    code, _, err = _run(capsys, "check", str(WORKLOADS / "01-admit.yaml"), "--state", str(tmp_path))
    assert code == 0
    assert err == "draquota check: placement not checked: the cluster has no ResourceSlices\n"
    code, _, err = _run(
        capsys, "allocate", str(WORKLOADS / "01-admit.yaml"), "--state", str(tmp_path)
    )
    assert code == 2
    assert "no ResourceSlices" in err


# -- 10. the smaller ones --------------------------------------------------------------------


def test_help_has_no_spec_references_and_serve_options_have_help(
    capsys: pytest.CaptureFixture[str],
) -> None:
    for command in ("count", "check", "allocate", "serve", "status"):
        with pytest.raises(SystemExit):
            main([command, "--help"])
        text = capsys.readouterr().out
        assert "SPEC" not in text
    with pytest.raises(SystemExit):
        main(["serve", "--help"])
    text = " ".join(capsys.readouterr().out.split())
    assert "address to listen on (default 0.0.0.0)" in text
    assert "port to listen on (default 8443)" in text
    assert "(default INFO)" in text


def test_empty_file_is_an_error(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    empty = tmp_path / "empty.yaml"
    empty.write_text("---\n# nothing\n")
    code, out, err = _run(capsys, "check", str(empty))
    assert (code, out) == (2, "")
    assert err == f"draquota check: {empty}: no objects found (the file is empty)\n"


def test_container_claim_missing_from_resource_claims_is_an_error(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    pod = yaml.safe_load((WORKLOADS / "01-admit.yaml").read_text())
    pod["spec"]["containers"][0]["resources"]["claims"] = [{"name": "devcies"}]
    path = tmp_path / "pod.yaml"
    path.write_text(yaml.safe_dump(pod))
    code, _, err = _run(capsys, "count", str(path), "--state", str(STATE))
    assert code == 2
    assert err == (
        "draquota count: Pod team-a/train-0: spec.containers[0].resources.claims[0].name: "
        'claim "devcies" not found in spec.resourceClaims (entries: devices)\n'
    )
    code, out, _ = _run(capsys, "check", str(path), "--state", str(STATE), "-o", "json")
    (item,) = json.loads(out)["items"]
    assert not item["allowed"] and 'claim "devcies" not found' in item["message"]


def test_serve_checks_the_state_dir_before_making_a_certificate(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("TMPDIR", str(tmp_path))
    import tempfile

    monkeypatch.setattr(tempfile, "tempdir", None)
    code, _, err = _run(capsys, "serve", "--state", str(tmp_path / "missing"))
    assert code == 2
    assert err == f"draquota serve: --state {tmp_path / 'missing'}: no such file or directory\n"
    assert not list(tmp_path.glob("draquota-certs-*"))


def test_serve_refuses_an_advertised_address_other_replicas_cannot_reach_over_https(
    capsys: pytest.CaptureFixture[str],
) -> None:
    argv = ("serve", "--state", str(STATE), "--advertise-address", "http://10.0.0.7:8443")
    code, _, err = _run(capsys, *argv)
    assert code == 2
    assert err.startswith("draquota serve: --advertise-address 'http://10.0.0.7:8443': must be")


def test_check_queue_column_names_the_cluster_queue(capsys: pytest.CaptureFixture[str]) -> None:
    files = sorted(map(str, WORKLOADS.glob("*.yaml")))
    out = _run(capsys, "check", *files, "--state", str(STATE))[1]
    rows = {r.split()[2]: r.split()[5] for r in out.split("\n\n")[0].splitlines()[1:]}
    assert rows["train-2"] == "team-a"  # denied over quota
    assert rows["sweep"] == "team-a"  # an admitted Job
    assert rows["nic-test"] == "team-b"
    assert rows["hello"] == "-"  # not managed


LOCAL = ("--host", "127.0.0.1", "--port")


def test_serve_removes_its_throwaway_certificate_on_exit(tmp_path: Path) -> None:
    import os
    import signal
    import socket
    import time

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    log = tmp_path / "serve.log"
    with log.open("wb") as out:
        process = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "webhook.cli",
                "serve",
                "--state",
                str(STATE),
                *LOCAL,
                str(port),
            ],
            stdout=out,
            stderr=subprocess.STDOUT,
            env={**os.environ, "TMPDIR": str(tmp_path), "PYTHONUNBUFFERED": "1"},
            cwd=ROOT,
        )
    try:
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:  # until it accepts connections
            assert process.poll() is None, log.read_text()
            with socket.socket() as probe:
                if probe.connect_ex(("127.0.0.1", port)) == 0:
                    break
            time.sleep(0.1)
        (made,) = tmp_path.glob("draquota-certs-*")
        assert (made / "ca.crt").is_file()
    finally:
        process.send_signal(signal.SIGTERM)
        assert process.wait(timeout=30) == 0
    assert not list(tmp_path.glob("draquota-certs-*"))


def test_progress_is_told_how_far_a_large_file_has_been_read(tmp_path: Path) -> None:
    from webhook.store.manifests import load_inputs

    big = tmp_path / "big.yaml"
    big.write_text("".join(f"---\nkind: Pod\nmetadata: {{name: p{i}}}\n" for i in range(2500)))
    seen: list[tuple[str, int]] = []

    class Recorder:
        def reading(self, path: Path, documents: int) -> None:
            seen.append(("reading", documents))

        def file_read(self, path: Path, objects: int) -> None:
            seen.append(("read", objects))

    load_inputs([big], progress=Recorder())
    assert seen == [("reading", 1000), ("reading", 2000), ("read", 2500)]


def test_package_metadata_uses_an_spdx_license_and_a_plain_editable_install() -> None:
    # setuptools warns (three times per `make setup`) about a license table, and about
    # the meta path finder of an editable install without package-dir.
    import tomllib

    project = tomllib.loads((ROOT / "pyproject.toml").read_text())
    assert project["project"]["license"] == "Apache-2.0"
    assert project["tool"]["setuptools"]["package-dir"] == {"": "."}
