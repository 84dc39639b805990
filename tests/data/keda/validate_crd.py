"""Validates Kubernetes objects against a CustomResourceDefinition's openAPIV3Schema.

usage: validate_crd.py CRD.yaml OBJECTS.json
OBJECTS.json is a JSON list of objects; each must be of the CRD's kind and served version.
Fields the schema does not name are refused (strict field validation), except under
x-kubernetes-preserve-unknown-fields or where the schema allows additionalProperties.
Exit 0 when every object validates; otherwise each error on stderr and exit 1.
"""

import json
import sys

import jsonschema
import yaml


def strict(schema):
    """The schema with additionalProperties: false wherever it lists properties and says
    nothing else about unknown ones; metadata is left to the API server's own checks."""
    if isinstance(schema, dict):
        out = {k: strict(v) for k, v in schema.items()}
        if (
            "properties" in out
            and "additionalProperties" not in out
            and not out.get("x-kubernetes-preserve-unknown-fields")
        ):
            out["additionalProperties"] = False
        return out
    if isinstance(schema, list):
        return [strict(v) for v in schema]
    return schema


def main():
    crd = yaml.safe_load(open(sys.argv[1]))
    objects = json.load(open(sys.argv[2]))
    group, kind = crd["spec"]["group"], crd["spec"]["names"]["kind"]
    versions = {
        f"{group}/{v['name']}": v["schema"]["openAPIV3Schema"]
        for v in crd["spec"]["versions"]
        if v.get("served")
    }
    failed = False
    for obj in objects:
        name = f"{obj.get('kind')} {obj.get('metadata', {}).get('name')}"
        if obj.get("kind") != kind or obj.get("apiVersion") not in versions:
            print(f"{name}: not a served version of {kind} ({obj.get('apiVersion')})", file=sys.stderr)
            failed = True
            continue
        schema = strict(versions[obj["apiVersion"]])
        schema["properties"]["metadata"] = {"type": "object"}
        validator = jsonschema.Draft7Validator(schema)
        for error in validator.iter_errors(obj):
            path = "/".join(str(p) for p in error.absolute_path)
            print(f"{name}: {path}: {error.message}", file=sys.stderr)
            failed = True
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
