#!/usr/bin/env python3
"""Regenerate the GitHub fixtures under tests/fixtures/ from two pinned npm packages.

    .venv/bin/python scripts/refresh-github-fixtures.py [--workdir DIR]

Needs `npm` (only `npm pack` is used, against the npm registry) and nothing beyond the
standard library. The output is deterministic: running it twice gives byte-identical files.

* @octokit/webhooks-examples -> tests/fixtures/webhooks/<event>.json (+ SOURCE.md):
  every example payload GitHub publishes for the events convergebot handles.
* @octokit/openapi -> tests/fixtures/github-openapi-subset.json: for each REST operation the
  bot calls, the success-response schema with every $ref inlined, converted from OpenAPI 3.0
  to JSON Schema Draft 2020-12 (`nullable: true` becomes a union with null), plus the spec's
  own example responses for that operation.

To move to newer packages, change the versions and integrities below (`npm view PKG@VER
dist.integrity`), run the script, and run tests/unit/test_fixtures_github.py.
"""

from __future__ import annotations

import argparse
import base64
import hashlib
import json
import shutil
import subprocess
import sys
import tarfile
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
FIXTURES = ROOT / "tests" / "fixtures"
WEBHOOKS_DIR = FIXTURES / "webhooks"
SUBSET_FILE = FIXTURES / "github-openapi-subset.json"

WEBHOOKS_PKG = {
    "name": "@octokit/webhooks-examples",
    "version": "7.6.1",
    "published": "2024-12-13",
    "integrity": "sha512-De6U3XB6O3DtCa7bKgCMzTHdeopqqZ6SNivMYJnK65ierKL1AnNIA0t"
                 "kRYCRS7lwGT792d+Ps1WbfHlso6MynQ==",
    "file": "api.github.com/index.json",
}
OPENAPI_PKG = {
    "name": "@octokit/openapi",
    "version": "23.0.2",
    "published": "2026-09-09",
    "integrity": "sha512-pV8M7L9GY23AybNvTmo2nyjmpmnt6+2sRE/tqr0ZLQcPS4lnw7u5eZG"
                 "NmwRNkBC3D7gZXbFx5AHzLUVRBXGDhg==",
    "file": "generated/api.github.com.json",
}

EVENTS = [
    "pull_request",
    "pull_request_review",
    "pull_request_review_comment",
    "pull_request_review_thread",
    "issue_comment",
    "check_suite",
    "check_run",
    "status",
    "push",
    "ping",
    "installation",
    "installation_repositories",
]

OPERATIONS = [
    "GET /repos/{owner}/{repo}",
    "GET /repos/{owner}/{repo}/pulls",
    "GET /repos/{owner}/{repo}/pulls/{pull_number}",
    "GET /repos/{owner}/{repo}/git/ref/{ref}",
    "GET /repos/{owner}/{repo}/pulls/{pull_number}/reviews",
    "GET /repos/{owner}/{repo}/pulls/{pull_number}/comments",
    "POST /repos/{owner}/{repo}/pulls/{pull_number}/comments/{comment_id}/replies",
    "GET /repos/{owner}/{repo}/commits/{ref}/check-runs",
    "GET /repos/{owner}/{repo}/commits/{ref}/status",
    "POST /repos/{owner}/{repo}/check-runs",
    "PATCH /repos/{owner}/{repo}/check-runs/{check_run_id}",
    "GET /repos/{owner}/{repo}/collaborators/{username}/permission",
    "GET /repos/{owner}/{repo}/issues/{issue_number}/comments",
    "POST /repos/{owner}/{repo}/issues/{issue_number}/comments",
    "POST /repos/{owner}/{repo}/issues/comments/{comment_id}/reactions",
    "POST /repos/{owner}/{repo}/pulls/comments/{comment_id}/reactions",
    "POST /repos/{owner}/{repo}/pulls/{pull_number}/requested_reviewers",
    "GET /repos/{owner}/{repo}/pulls/{pull_number}/requested_reviewers",
    "PUT /repos/{owner}/{repo}/pulls/{pull_number}/merge",
    "PUT /repos/{owner}/{repo}/pulls/{pull_number}/update-branch",
    "GET /repos/{owner}/{repo}/contents/{path}",
    "GET /rate_limit",
    "GET /app/hook/deliveries",
    "GET /app/hook/deliveries/{delivery_id}",
    "POST /app/hook/deliveries/{delivery_id}/attempts",
    "GET /repos/{owner}/{repo}/hooks/{hook_id}/deliveries",
    "POST /repos/{owner}/{repo}/hooks/{hook_id}/deliveries/{delivery_id}/attempts",
    "GET /orgs/{org}/hooks/{hook_id}/deliveries",
    "POST /orgs/{org}/hooks/{hook_id}/deliveries/{delivery_id}/attempts",
    "GET /repos/{owner}/{repo}/issues/comments",
    "GET /repos/{owner}/{repo}/pulls/comments",
    "GET /installation/repositories",
    "GET /repos/{owner}/{repo}/compare/{basehead}",
]

DIALECT = "https://json-schema.org/draft/2020-12/schema"
# Above this size the subset drops documentation keywords (description/example/examples).
TRIM_ABOVE_BYTES = 3 * 1024 * 1024
DOC_KEYWORDS = ("description", "example", "examples")
# Keywords whose value is a map of name -> schema (the names are data, not keywords).
SCHEMA_MAPS = ("properties", "patternProperties", "$defs", "definitions", "dependentSchemas")
# Keywords whose value is one schema / a list of schemas.
SCHEMA_ONE = ("items", "additionalProperties", "not", "contains", "propertyNames",
              "unevaluatedItems", "unevaluatedProperties", "if", "then", "else")
SCHEMA_LIST = ("allOf", "anyOf", "oneOf", "prefixItems")


# --- fetching -------------------------------------------------------------------------------

def fetch_package(pkg: dict, workdir: Path) -> Path:
    """`npm pack` the pinned version into workdir (reused if already there), check its
    integrity, unpack the one file we read, and return the package directory."""
    spec = f"{pkg['name']}@{pkg['version']}"
    tarball = workdir / (pkg["name"].lstrip("@").replace("/", "-") + f"-{pkg['version']}.tgz")
    if not tarball.exists():
        print(f"npm pack {spec}", file=sys.stderr)
        subprocess.run(["npm", "pack", spec, "--pack-destination", str(workdir), "--silent"],
                       check=True, stdout=subprocess.DEVNULL)
    algo, _, want = pkg["integrity"].partition("-")
    got = base64.b64encode(hashlib.new(algo, tarball.read_bytes()).digest()).decode()
    if got != want:
        sys.exit(f"{tarball}: integrity mismatch for {spec}: got {algo}-{got}")
    dest = workdir / f"unpacked-{tarball.stem}"
    if not dest.exists():
        tmp = workdir / f".unpacking-{tarball.stem}"
        shutil.rmtree(tmp, ignore_errors=True)
        with tarfile.open(tarball) as tf:
            members = [tf.getmember(f"package/{pkg['file']}")]
            if hasattr(tarfile, "data_filter"):
                tf.extractall(tmp, members=members, filter="data")
            else:  # Python < 3.11.4
                tf.extractall(tmp, members=members)
        tmp.rename(dest)
    return dest / "package"


def write_json(path: Path, data, indent: int | None = 2) -> int:
    text = json.dumps(data, indent=indent, ensure_ascii=False,
                      separators=None if indent is not None else (",", ":")) + "\n"
    path.write_text(text, encoding="utf-8")
    return len(text.encode("utf-8"))


# --- webhooks -------------------------------------------------------------------------------

def build_webhooks(pkg_dir: Path) -> None:
    index = json.loads((pkg_dir / WEBHOOKS_PKG["file"]).read_text(encoding="utf-8"))
    by_name = {entry["name"]: entry for entry in index}
    if WEBHOOKS_DIR.exists():
        for old in WEBHOOKS_DIR.glob("*.json"):
            old.unlink()
    WEBHOOKS_DIR.mkdir(parents=True, exist_ok=True)
    rows, total, missing = [], 0, []
    for event in EVENTS:
        entry = by_name.get(event)
        if entry is None or not entry.get("examples"):
            missing.append(event)
            continue
        examples = entry["examples"]
        size = write_json(WEBHOOKS_DIR / f"{event}.json", examples)
        total += size
        actions = sorted({e["action"] for e in examples if "action" in e})
        covered = ", ".join(actions) or "(no action field)"
        rows.append(f"| `{event}` | {len(examples)} | {covered} |")
    if missing:
        sys.exit(f"events missing from {WEBHOOKS_PKG['name']}: {', '.join(missing)}")
    source = f"""# Webhook example payloads

Generated by `scripts/refresh-github-fixtures.py`; do not edit by hand.

- Package: `{WEBHOOKS_PKG['name']}` (GitHub's example payloads, collected by the Octokit project)
- Version: {WEBHOOKS_PKG['version']} (published {WEBHOOKS_PKG['published']})
- Integrity: `{WEBHOOKS_PKG['integrity']}`
- File read: `{WEBHOOKS_PKG['file']}` (github.com, not GHES)

Each `<event>.json` is a JSON list holding **all** of that package's example payloads for the
event, unchanged and in the package's order. Events that carry an `action` have it in every
payload; `status`, `push` and `ping` have none.

| event | examples | actions covered |
| --- | --- | --- |
""" + "\n".join(rows) + "\n"
    (WEBHOOKS_DIR / "SOURCE.md").write_text(source, encoding="utf-8")
    print(f"webhooks: {len(rows)} events, {total} bytes", file=sys.stderr)


# --- OpenAPI subset -------------------------------------------------------------------------

class Resolver:
    """Inline every $ref of an OpenAPI 3.0 document, cutting reference cycles with `{}`."""

    def __init__(self, doc: dict):
        self.doc = doc
        self.cut: set[str] = set()

    def lookup(self, ref: str):
        if not ref.startswith("#/"):
            raise ValueError(f"external $ref not supported: {ref}")
        node = self.doc
        for part in ref[2:].split("/"):
            node = node[part.replace("~1", "/").replace("~0", "~")]
        return node

    def resolve(self, node, stack: tuple[str, ...] = ()):
        if isinstance(node, list):
            return [self.resolve(v, stack) for v in node]
        if not isinstance(node, dict):
            return node
        if "$ref" in node:
            ref = node["$ref"]
            if ref in stack:  # a cycle: the object refers to itself somewhere below
                self.cut.add(ref)
                return {"$comment": f"recursive reference to {ref} cut here"}
            target = self.resolve(self.lookup(ref), stack + (ref,))
            siblings = {k: v for k, v in node.items() if k != "$ref"}
            if siblings:  # OpenAPI 3.0 ignores them, but keep any as plain annotations
                target = {**target, **self.resolve(siblings, stack)}
            return target
        return {k: self.resolve(v, stack) for k, v in node.items()}


def to_json_schema(schema):
    """Convert an (already dereferenced) OpenAPI 3.0 schema object to Draft 2020-12."""
    if isinstance(schema, bool) or not isinstance(schema, dict):
        return schema
    out = {}
    for key, value in schema.items():
        if key in SCHEMA_MAPS and isinstance(value, dict):
            out[key] = {name: to_json_schema(sub) for name, sub in value.items()}
        elif key in SCHEMA_ONE and isinstance(value, dict):
            out[key] = to_json_schema(value)
        elif key in SCHEMA_LIST and isinstance(value, list):
            out[key] = [to_json_schema(sub) for sub in value]
        elif key == "discriminator":
            continue  # OpenAPI-only, and its mapping points into components we don't ship
        elif key.startswith("x-") or key in ("xml", "externalDocs"):
            continue
        else:
            out[key] = value
    if out.pop("nullable", False):
        if "type" in out:
            types = out["type"] if isinstance(out["type"], list) else [out["type"]]
            if "null" not in types:
                out["type"] = [*types, "null"]
            if "enum" in out and None not in out["enum"]:
                out["enum"] = [*out["enum"], None]
        elif any(k in out for k in ("allOf", "anyOf", "oneOf", "enum", "const", "not")):
            # `nullable` applies to the whole schema: null OR whatever the rest allows
            keep = {k: v for k, v in out.items() if k in ("title", "description")}
            rest = {k: v for k, v in out.items() if k not in keep}
            out = {**keep, "anyOf": [{"type": "null"}, rest]}
        # else: no type and no constraint, so null is already accepted
    # OpenAPI 3.0 spelled these as booleans modifying minimum/maximum
    for bound, flag in (("minimum", "exclusiveMinimum"), ("maximum", "exclusiveMaximum")):
        if out.get(flag) is True and bound in out:
            out[flag] = out.pop(bound)
        elif out.get(flag) is False:
            out.pop(flag)
    return out


def strip_docs(schema):
    """Drop description/example/examples keywords (never property *names*)."""
    if isinstance(schema, list):
        return [strip_docs(v) for v in schema]
    if not isinstance(schema, dict):
        return schema
    out = {}
    for key, value in schema.items():
        if key in DOC_KEYWORDS:
            continue
        if key in SCHEMA_MAPS and isinstance(value, dict):
            out[key] = {name: strip_docs(sub) for name, sub in value.items()}
        else:
            out[key] = strip_docs(value)
    return out


def pick_media(content: dict) -> str:
    for media in ("application/json", *content):
        if media in content and "schema" in content[media]:
            return media
    raise KeyError("no media type with a schema")


def build_subset(pkg_dir: Path) -> None:
    doc = json.loads((pkg_dir / OPENAPI_PKG["file"]).read_text(encoding="utf-8"))
    resolver = Resolver(doc)
    operations, missing = {}, []
    for op in OPERATIONS:
        method, path = op.split(" ", 1)
        spec_op = doc["paths"].get(path, {}).get(method.lower())
        if spec_op is None:
            missing.append(op)
            continue
        successes = []
        for code, response in spec_op["responses"].items():
            if not code.startswith("2"):
                continue
            response = resolver.resolve(response)
            content = response.get("content") or {}
            if not content:
                successes.append((int(code), None, None, {}))
                continue
            media = pick_media(content)
            schema = to_json_schema(content[media]["schema"])
            named = content[media].get("examples") or {}
            examples = {name: ex["value"] for name, ex in named.items() if "value" in ex}
            if "example" in content[media]:
                examples.setdefault("example", content[media]["example"])
            successes.append((int(code), media, schema, examples))
        if not successes:
            missing.append(op)
            continue
        status, media, schema, examples = successes[0]
        entry = {
            "operationId": spec_op.get("operationId"),
            "status": status,
            "media_type": media,
            "schema": schema,
            "examples": examples,
        }
        if len(successes) > 1:
            entry["success_statuses"] = [s[0] for s in successes]
            others = {str(s[0]): {"media_type": s[1], "schema": s[2]}
                      for s in successes[1:] if s[2] != schema}
            if others:
                entry["other_success_schemas"] = others
        operations[op] = entry

    subset = {
        "source": {
            "package": OPENAPI_PKG["name"],
            "version": OPENAPI_PKG["version"],
            "published": OPENAPI_PKG["published"],
            "integrity": OPENAPI_PKG["integrity"],
            "file": OPENAPI_PKG["file"],
            "openapi": doc["openapi"],
            "api_version": doc["info"].get("version"),
            "generator": "scripts/refresh-github-fixtures.py",
        },
        "dialect": DIALECT,
        "notes": [
            "Each schema is the operation's success-response body schema with every $ref inlined;"
            " a reference cycle is cut with a {\"$comment\": ...} schema that accepts anything.",
            "Converted from OpenAPI 3.0 to JSON Schema Draft 2020-12: `nullable: true` became a"
            " union with null; discriminator/x-* keywords were dropped.",
            "`examples` are the spec's own example response bodies for that status and media type.",
        ],
        "recursion_cut_at": sorted(resolver.cut),
        "missing_operations": missing,
        "trimmed_docs": False,
        "operations": operations,
    }
    size = len(json.dumps(subset, indent=1, ensure_ascii=False).encode("utf-8"))
    if size > TRIM_ABOVE_BYTES:
        for entry in operations.values():
            entry["schema"] = strip_docs(entry["schema"])
            for other in entry.get("other_success_schemas", {}).values():
                other["schema"] = strip_docs(other["schema"])
        subset["trimmed_docs"] = True
    size = write_json(SUBSET_FILE, subset, indent=1)
    print(f"openapi subset: {len(operations)} operations, missing {missing or 'none'}, "
          f"{size} bytes (trimmed docs: {subset['trimmed_docs']})", file=sys.stderr)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--workdir", type=Path,
                    help="keep the downloaded tarballs here and reuse them (default: a temp dir)")
    args = ap.parse_args()
    FIXTURES.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="gh-fixtures-") as tmp:
        workdir = args.workdir or Path(tmp)
        workdir.mkdir(parents=True, exist_ok=True)
        build_webhooks(fetch_package(WEBHOOKS_PKG, workdir))
        build_subset(fetch_package(OPENAPI_PKG, workdir))


if __name__ == "__main__":
    main()
