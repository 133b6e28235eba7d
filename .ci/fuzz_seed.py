"""Seed data for `.ci/fuzz`: makes one of most kinds of resource through
the API, then writes a schemathesis configuration whose dictionaries hold
the references that exist, bound to every path parameter and body field
that holds a reference of that kind (by the `pattern` the OpenAPI document
gives it). Generated requests then name real resources most of the time and
reach the handlers' existence, precondition and state rules instead of
stopping at 404.

Usage: fuzz_seed.py BASE_URL SECRET OWN_CREDENTIAL_REF CONFIG_OUT

Best effort: a step that fails is reported and the seeding goes on; the
fuzzing itself decides what is a failure.
"""

import json
import re
import sys
import urllib.error
import urllib.request
import uuid

BASE, SECRET, OWN_CREDENTIAL, OUT = sys.argv[1:5]
REF = re.compile(r"^([a-z]+)_[A-Za-z0-9]{12}$")
PATTERN = re.compile(r"^\^([a-z]+)_\[A-Za-z0-9\]\{12\}\$$")


def call(method, path, body=None, if_match=None):
    headers = {"Authorization": f"Bearer {SECRET}"}
    data = None
    if method == "POST":
        headers["Idempotency-Key"] = f"seed-{uuid.uuid4().hex}"
        headers["Content-Type"] = "application/json"
        data = json.dumps({} if body is None else body).encode()
    if if_match:
        headers["If-Match"] = if_match
    req = urllib.request.Request(BASE + path, data=data, headers=headers, method=method)
    try:
        with urllib.request.urlopen(req, timeout=15) as r:
            return r.status, json.loads(r.read() or b"null")
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read() or b"null")


def step(what, method, path, body=None, expect=(200, 201)):
    status, reply = call(method, path, body)
    if status not in expect:
        print(f"fuzz_seed: {what}: HTTP {status} {json.dumps(reply)[:300]}", file=sys.stderr)
        return {}
    return (reply or {}).get("data") or {}


def eur(value):
    return {"currency": "EUR", "unit": "minor", "value": value}


def sellable(name, amount, interval=None):
    product = step("product", "POST", "/api/v1/products", {"name": name}).get("product_ref")
    if not product:
        return None
    step("publish product", "POST", f"/api/v1/products/{product}/publish")
    body = {"product_ref": product, "amount": eur(amount), "type": "one_time"}
    if interval:
        body.update(type="recurring", interval=interval)
    price = step("price", "POST", "/api/v1/prices", body).get("price_ref")
    if price:
        step("publish price", "POST", f"/api/v1/prices/{price}/publish")
    offers = step("offers", "GET", f"/api/v1/offers?product_ref={product}").get("items") or []
    return offers[0]["offer_ref"] if offers else None


def config(offer, publish=True):
    body = {"name": "Fuzz", "line_items": [{"offer_ref": offer, "quantity": 1}],
            "success_url": "https://example.com/ok"}
    ref = step("checkout config", "POST", "/api/v1/checkout-configs", body).get("config_ref")
    if ref and publish:
        step("publish config", "POST", f"/api/v1/checkout-configs/{ref}/publish")
    return ref


def session(config_ref, n):
    body = {"config_ref": config_ref, "buyer": {"email": f"fuzz{n}@example.com", "name": "Fuzz"}}
    return step("session", "POST", "/api/v1/checkout-sessions", body).get("checkout_session_ref")


def pay(session_ref, method):
    if session_ref:
        return step(f"pay {method}", "POST", f"/api/v1/checkout-sessions/{session_ref}/pay",
                    {"payment_method": method})
    return {}


def seed():
    one_time = sellable("Fuzz one-time", "1999")
    monthly = sellable("Fuzz monthly", "999", "month")
    configs = [config(o) for o in (one_time, monthly) if o]
    if one_time:
        config(one_time, publish=False)
    if configs:
        paid = pay(session(configs[0], 1), "pm_card_visa")
        pay(session(configs[0], 2), "pm_card_dispute")
        pay(session(configs[0], 3), "pm_card_requires_action")
        session(configs[0], 4)
        payment = (paid.get("payment") or {}).get("payment_intent_ref")
        if payment:
            step("refund", "POST", "/api/v1/refunds", {"payment_intent_ref": payment,
                 "amount": eur("100"), "reason": "requested_by_customer", "access_effect": "retain"})
    if len(configs) > 1:
        pay(session(configs[1], 5), "pm_card_visa")
    env = (step("environments", "GET", "/api/v1/environments").get("items") or [{}])[0]
    endpoint = step("endpoint", "POST", "/api/v1/webhook_endpoints",
                    {"url": "http://127.0.0.1:9/fuzz"}).get("endpoint_ref")
    if endpoint and env.get("environment_ref"):
        step("subscription", "POST", f"/api/v1/webhook_endpoints/{endpoint}/subscriptions",
             {"public_event_type": "payment.succeeded", "scope_type": "environment",
              "scope_ref": env["environment_ref"], "dto_version": 1})
        step("test send", "POST", f"/api/v1/webhook_endpoints/{endpoint}/test_send",
             {"public_event_type": "payment.succeeded"})
    account = step("service account", "POST", "/api/v1/service_accounts",
                   {"name": "fuzz-target"}).get("principal_ref")
    if account:
        step("credential", "POST", f"/api/v1/service_accounts/{account}/credentials", {})
        step("grant", "POST", f"/api/v1/service_accounts/{account}/grants",
             {"permission_action": "products:read_list"})


def collect(doc):
    """Every reference the lists show, by prefix."""
    found = {}

    def walk(v):
        if isinstance(v, dict):
            for k, x in v.items():
                if (k.endswith("_ref") or k.endswith("_refs")) and k != "scope_ref":
                    for s in x if isinstance(x, list) else [x]:
                        m = REF.match(s) if isinstance(s, str) else None
                        if m and s != OWN_CREDENTIAL:
                            found.setdefault(m.group(1), set()).add(s)
                walk(x)
        elif isinstance(v, list):
            for x in v:
                walk(x)

    lists = [p for p, item in doc["paths"].items()
             if "get" in item and item["get"]["operationId"].startswith("list") and "{" not in p]
    for path in lists:
        walk(step(path, "GET", path + ("?limit=100" if "cursor" in json.dumps(
            doc["paths"][path]["get"].get("parameters", [])) else "")))
    # Lists under a resource, once for each seeded parent.
    for path, item in doc["paths"].items():
        m = re.fullmatch(r"(.*)/\{(\w+)\}(/[a-z_/]+)", path)
        if "get" not in item or not m or "{" in m.group(1) + m.group(3):
            continue
        prefix = pattern_prefix(param_schema(item["get"], m.group(2)))
        for parent in sorted(found.get(prefix, ()))[:3]:
            walk(step(path, "GET", f"{m.group(1)}/{parent}{m.group(3)}"))
    return found


def param_schema(operation, name):
    for p in operation.get("parameters", []):
        if p["name"] == name:
            return p.get("schema", {})
    return {}


def pattern_prefix(schema):
    m = PATTERN.match(schema.get("pattern", "")) if isinstance(schema, dict) else None
    return m.group(1) if m else None


def bindings(doc):
    """(binding key, prefix) for every path parameter and body field that
    holds a reference."""
    schemas = doc["components"]["schemas"]
    out = set()

    def walk(schema, path, depth=0):
        if depth > 6 or not isinstance(schema, dict):
            return
        if "$ref" in schema:
            walk(schemas.get(schema["$ref"].rsplit("/", 1)[-1]), path, depth + 1)
            return
        prefix = pattern_prefix(schema)
        if prefix and path:
            out.add(("body." + path, prefix))
        for name, sub in (schema.get("properties") or {}).items():
            walk(sub, f"{path}.{name}" if path else name, depth + 1)
        if isinstance(schema.get("items"), dict) and path:
            walk(schema["items"], path + "[*]", depth + 1)

    for item in doc["paths"].values():
        for operation in item.values():
            for p in operation.get("parameters", []):
                prefix = pattern_prefix(p.get("schema", {}))
                if prefix and p["in"] == "path":
                    out.add((f"path.{p['name']}", prefix))
            body = operation.get("requestBody", {}).get("content", {}).get("application/json")
            if body:
                walk(body["schema"], "")
    return sorted(out)


def main():
    status, doc = call("GET", "/api/v1/openapi.json")
    if status != 200:
        sys.exit(f"fuzz_seed: no OpenAPI document (HTTP {status})")
    seed()
    found = collect(doc)
    lines = []
    for prefix, refs in sorted(found.items()):
        values = ", ".join(json.dumps(r) for r in sorted(refs))
        lines += [f"[dictionaries.{prefix}]", f"values = [{values}]", ""]
    lines.append("[parameters]")
    bound = 0
    for key, prefix in bindings(doc):
        if prefix in found:
            probability = 0.8 if key.startswith("path.") else 0.6
            lines.append(f'"{key}" = {{ dictionary = "{prefix}", probability = {probability} }}')
            bound += 1
    with open(OUT, "w", encoding="utf-8") as f:
        f.write("\n".join(lines) + "\n")
    kinds = ", ".join(f"{p} {len(r)}" for p, r in sorted(found.items()))
    print(f"fuzz_seed: references known: {kinds}; {bound} parameters bound", file=sys.stderr)


main()
