"""Renders the gpulens Helm chart with Helm's own engine (PyPI helm-python-sdk, Helm v4's Go
code as a shared library) for each values case, and checks each rendering the way a cluster and
Helm would take it: `helm lint --strict`, values.schema.json, and every object of a built-in
kind against Kubernetes' OpenAPI schemas in strict mode (kubernetes-validate).

    python render.py CHART CASES.json OUT.json

CASES.json: {"case name": {"values": {...}, "fails": false}, ...}. OUT.json gets, per case,
{"objects": [...], "notes": "...", "lint": [...], "invalid": [...]} or {"error": "..."}; a
case marked "fails" must be refused by the chart (schema, `required` or `fail`). The Rust test
(collector/tests/it/helm.rs) makes the cases and asserts on the objects.
"""

import json
import sys

import helm_python as helm
import kubernetes_validate
import yaml

KUBERNETES = "1.31.0"
# Custom resources have no schema in kubernetes-validate: the Rust test checks them.
CUSTOM = {"monitoring.coreos.com/v1", "cert-manager.io/v1"}


def render(chart_dir, values):
    chart = helm.Chart.load(chart_dir)
    release = helm.Config(storage_driver="memory").install(
        chart, "gpulens", values, namespace="gpulens", dry_run="client"
    )
    docs = [d for d in yaml.safe_load_all(release["manifest"]) if d]
    return docs, release.get("notes", "")


def invalid(objects):
    out = []
    for o in objects:
        if o.get("apiVersion") in CUSTOM:
            continue
        try:
            kubernetes_validate.validate(o, KUBERNETES, strict=True)
        except kubernetes_validate.ValidationError as e:
            out.append(f"{o['kind']} {o['metadata']['name']}: {e.message} at {list(e.path)}")
        except Exception as e:  # an unknown kind or version is a failure too
            out.append(f"{o.get('kind')} {o.get('metadata', {}).get('name')}: {e}")
    return out


def main():
    chart_dir, cases_file, out_file = sys.argv[1:4]
    cases = json.load(open(cases_file))
    result = {}
    for name, case in cases.items():
        values = case["values"]
        try:
            objects, notes = render(chart_dir, values)
        except Exception as e:
            result[name] = {"error": f"{type(e).__name__}: {e}"}
            continue
        lint = helm.lint(
            chart_dir, values, strict=True, namespace="gpulens", kube_version="v" + KUBERNETES
        )
        result[name] = {
            "objects": objects,
            "notes": notes,
            "lint": [m for m in lint.get("messages", []) if m.get("severity", 0) >= 2],
            "invalid": invalid(objects),
        }
    json.dump(result, open(out_file, "w"))


if __name__ == "__main__":
    main()
