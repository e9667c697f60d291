"""Two ``/metrics`` expositions compared sample for sample: vLLM's own
(prometheus_client) and the sidecar's. No vLLM import, so the live-engine
driver runs it as a plain client."""

import urllib.request

from prometheus_client.parser import text_string_to_metric_families


def openmetrics(url: str, timeout: float = 10) -> "str | None":
    """The exposition at ``url`` as OpenMetrics, which carries the
    sidecar's exemplars (text 0.0.4 has none); ``None`` when unreachable."""
    request = urllib.request.Request(url, headers={"Accept": "application/openmetrics-text; version=1.0.0"})
    try:
        with urllib.request.urlopen(request, timeout=timeout) as response:
            return response.read().decode()
    except OSError:
        return None


def bound(le: str) -> str:
    """A bucket's ``le`` as one spelling of its number: vLLM's Python client
    writes ``1e+06`` and ``1e-05`` where the sidecar writes ``1000000.0`` and
    ``0.00001`` (docs/SEMANTICS.md §6), the same bound."""
    return repr(float(le))


def samples(text, model):
    """``{(name, labels): value}`` of every ``vllm:`` sample of the model
    (``_created`` samples are prometheus_client's own, not vLLM's metrics),
    and ``{family: {keys}}``."""
    out = {}
    families = {}
    for family in text_string_to_metric_families(text):
        if not family.name.startswith("vllm:"):
            continue
        for s in family.samples:
            if s.name.endswith("_created"):
                continue
            if s.labels.get("model_name", model) != model:
                continue
            labels = dict(s.labels)
            if s.name.endswith("_bucket") and "le" in labels:
                labels["le"] = bound(labels["le"])
            key = (s.name, tuple(sorted(labels.items())))
            out[key] = s.value
            families.setdefault(family.name, set()).add(key)
    return out, families


#: How far apart two ``_sum`` samples may be, relative to their size, when
#: vLLM runs several API server processes: vLLM adds each process's sum at
#: scrape time, the sidecar keeps one running sum, and floating-point
#: addition in another order differs in the last bits (a few units in the
#: last place of a double, about 1e-16 each).
SUM_ROUNDING = 1e-12


def rounded_apart(key, a, b) -> bool:
    """Whether ``key`` is a ``_sum`` sample whose two values differ by
    :data:`SUM_ROUNDING` at most."""
    return (
        key[0].endswith("_sum")
        and a is not None
        and b is not None
        and abs(a - b) <= SUM_ROUNDING * max(abs(a), abs(b))
    )


def compare(theirs, mine, sums_in_any_order=False) -> dict:
    """Every sample of the families both sides have; ``theirs`` and ``mine``
    as :func:`samples` returns them. With ``sums_in_any_order`` (vLLM with
    several API servers) a ``_sum`` sample that differs only by the rounding
    of :data:`SUM_ROUNDING` is listed in ``sums_rounded_apart``, not in
    ``differing_samples``; every other sample must be equal."""
    (theirs, theirs_families), (mine, mine_families) = theirs, mine
    shared = sorted(set(theirs_families) & set(mine_families))
    differing, rounded = [], []
    for family in shared:
        for key in sorted(theirs_families[family] | mine_families[family]):
            a, b = theirs.get(key), mine.get(key)
            if a != b:
                sample = {"sample": key[0], "labels": dict(key[1]), "vllm": a, "ours": b}
                if sums_in_any_order and rounded_apart(key, a, b):
                    rounded.append(sample)
                else:
                    differing.append(sample)
    return {
        "sums_rounded_apart": rounded,
        "shared_families": shared,
        "shared_samples": sum(len(theirs_families[f]) for f in shared),
        "differing_samples": differing,
        "only_vllm": sorted(set(theirs_families) - set(mine_families)),
        "only_ours": sorted(set(mine_families) - set(theirs_families)),
    }
