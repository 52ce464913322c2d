#!/usr/bin/env python3
"""Regenerate the vendored CRD schema data from a checkout of kubernetes-sigs/agent-sandbox.

usage: extract.py REPO_GIT_DIR TAG   (needs PyYAML: Debian's python3-yaml)

For each CRD under k8s/crds/ at TAG, writes <plural>.<group>.json here: the v1beta1 version's
openAPIV3Schema, subresources and printer columns, and the CRD's names and scope. Descriptions
are dropped (they are documentation, most of the upstream files' size); nothing else is changed.
"""
import json
import os
import subprocess
import sys

import yaml


def strip_descriptions(node):
    if isinstance(node, dict):
        return {k: strip_descriptions(v) for k, v in node.items() if k != "description"}
    if isinstance(node, list):
        return [strip_descriptions(v) for v in node]
    return node


def main():
    repo, tag = sys.argv[1], sys.argv[2]
    here = os.path.dirname(os.path.abspath(__file__))
    git = ["git", "--git-dir", repo]
    commit = subprocess.check_output(git + ["rev-parse", tag + "^{commit}"], text=True).strip()
    names = subprocess.check_output(git + ["ls-tree", "--name-only", tag, "k8s/crds/"], text=True).split()
    for path in names:
        crd = yaml.safe_load(subprocess.check_output(git + ["show", "%s:%s" % (tag, path)]))
        spec = crd["spec"]
        version = next(v for v in spec["versions"] if v["name"] == "v1beta1")
        out = {
            "source": {"repository": "kubernetes-sigs/agent-sandbox", "tag": tag, "commit": commit, "path": path},
            "group": spec["group"],
            "version": version["name"],
            "names": spec["names"],
            "scope": spec["scope"],
            "subresources": version.get("subresources", {}),
            "additionalPrinterColumns": version.get("additionalPrinterColumns", []),
            "schema": strip_descriptions(version["schema"]["openAPIV3Schema"]),
        }
        name = "%s.%s.json" % (spec["names"]["plural"], spec["group"])
        with open(os.path.join(here, name), "w") as f:
            json.dump(out, f, indent=1, sort_keys=True)
            f.write("\n")
        print(name)


if __name__ == "__main__":
    main()
