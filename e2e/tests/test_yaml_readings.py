"""What kubectl makes of the files `validate` refuses as read two ways (issue 29, gap 7), on the real kubectl and
API server: each refusal stands for a real difference, and what `validate` accepts kubectl reads the same.

For every file: kubectl's own reading (`kubectl create --dry-run=client --validate=false -o json`) and the API
server's verdict (`kubectl create --dry-run=server`), against PyYAML's reading (the one `validate` had before it
refused these files). `OUTCOMES` records, per malformed file of gap 7, whether kubectl refuses it, reads it as
PyYAML does, or reads it otherwise (and then whether the API server admits what validate never saw). Scalars: a
value crfile says kubectl reads as X is X in kubectl's JSON (checking `kubeyaml` against kubectl itself), and
every spelling validate accepts is read alike.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from localcluster.cluster import ClusterInfo
from localcluster.fleet import install_crd
from sglang_operator.crfile import CRLoader, parse_documents
from sglang_operator.kubeyaml import kubectl_scalar, same_value
from tests.support.hostile.corpus import MALFORMED
from tests.unit.hostile.test_crfile import _AT, AGREE, DISAGREE

KUBECTL = Path(sys.executable).parent / "kubectl"

# fmt: off
OUTCOMES = {
    # kubectl reads another value than validate did, and the API server stores it
    "octal-0o": "differs, admitted", "hex-upper": "differs, admitted", "leading-zero-8": "differs, admitted",
    "exponent": "differs, refused", "dot-exponent": "differs, admitted", "binary-sign": "differs, refused",
    "merge-key-after": "differs, admitted", "merge-key-list": "differs, admitted", "json-exponent": "differs, admitted",
    "bang-tag": "differs, refused", "sexagesimal": "differs, refused", "key-on": "differs, refused",
    "key-y": "differs, admitted", "bool-tag-y": "differs, refused", "equals": "differs, admitted",
    "yaml11-bool-y": "differs, refused", "yaml11-bool-N": "differs, refused",
    # read alike: refused all the same, as a construct on which the readers can differ
    "inline-merge-key": "same, admitted",
    # kubectl cannot read the file at all
    "slash-escape": "kubectl refuses", "yaml-directive": "kubectl refuses", "separator-content": "kubectl refuses",
}
# fmt: on
GAP_7 = [case for case in MALFORMED if case.id in OUTCOMES]


@pytest.fixture(scope="module")
def crd(cluster: ClusterInfo, api_client: Any) -> ClusterInfo:
    install_crd(api_client)
    return cluster


def kubectl_create(cluster: ClusterInfo, namespace: str, path: Path, dry_run: str) -> tuple[int, Any]:
    args = ["create", f"--dry-run={dry_run}", "-o", "json", "-n", namespace, "-f", str(path)]
    if dry_run == "client":
        args.append("--validate=false")
    proc = subprocess.run(
        [str(KUBECTL), "--kubeconfig", str(cluster.kubeconfig), *args], capture_output=True, text=True, timeout=60
    )
    return proc.returncode, (json.loads(proc.stdout) if proc.returncode == 0 else proc.stderr)


def pyyaml_reading(text: str) -> Any:
    try:
        return yaml.load(text, Loader=CRLoader)
    except (yaml.YAMLError, ValueError, KeyError):
        return None


def _spec(obj: dict[str, Any]) -> Any:
    return obj.get("spec")


@pytest.mark.parametrize("case", GAP_7, ids=lambda c: c.id)
def test_each_refused_file_is_one_kubectl_refuses_or_reads_otherwise(
    case: Any, crd: ClusterInfo, namespace: str, tmp_path: Path
) -> None:
    path = tmp_path / f"{case.id}.yaml"
    path.write_bytes(case.data)
    rc, read = kubectl_create(crd, namespace, path, "client")
    if rc != 0:
        outcome = "kubectl refuses"
    else:
        before = pyyaml_reading(case.data.decode())
        same = isinstance(before, dict) and _spec(read) == before.get("spec") and read.get("spec") is not None
        server_rc, _ = kubectl_create(crd, namespace, path, "server")
        outcome = f"{'same' if same else 'differs'}, {'admitted' if server_rc == 0 else 'refused'}"
    assert outcome == OUTCOMES[case.id], read


# Plain scalars only; 2**64 + 1 is a float to go-yaml, which kubectl prints rounded to 17 digits (another number).
PLAIN = [s for s, _ in DISAGREE if s[:1] not in "!'\"" and s not in ("=", "<<", "0b_", "18446744073709551617")]


@pytest.mark.parametrize("scalar", PLAIN)
def test_kubectl_reads_scalars_as_crfile_says(scalar: str, crd: ClusterInfo, namespace: str, tmp_path: Path) -> None:
    path = tmp_path / "cr.yaml"
    path.write_text((_AT % scalar).replace("name: ok", "name: reading"))
    rc, read = kubectl_create(crd, namespace, path, "client")
    assert rc == 0, read
    assert same_value(read["spec"]["x"], kubectl_scalar(scalar))
    assert not same_value(pyyaml_reading(_AT % scalar)["spec"]["x"], read["spec"]["x"])


@pytest.mark.parametrize("scalar", AGREE)
def test_what_validate_accepts_kubectl_reads_alike(
    scalar: str, crd: ClusterInfo, namespace: str, tmp_path: Path
) -> None:
    text = (_AT % scalar).replace("name: ok", "name: reading")
    [validated] = parse_documents(text, "f")
    path = tmp_path / "cr.yaml"
    path.write_text(text)
    rc, read = kubectl_create(crd, namespace, path, "client")
    if scalar == ".inf":  # JSON has no infinity: kubectl refuses the file (validate refuses the field)
        assert rc != 0
        return
    assert rc == 0, read
    assert same_value(validated["spec"]["x"], read["spec"]["x"]), (validated["spec"]["x"], read["spec"]["x"])
