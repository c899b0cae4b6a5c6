"""Vector top-k with numpy, full-text and hybrid search, and the agent-memory API."""

import numpy as np
import pytest

import basalt


@pytest.fixture
def docs(con):
    con.sql("CREATE TABLE docs (topic TEXT, body TEXT, emb VECTOR(4))")
    rng = np.random.default_rng(7)
    emb = rng.standard_normal((500, 4)).astype(np.float32)
    topics = ["cats" if i % 2 else "dogs" for i in range(500)]
    bodies = [f"{t} document number {i}" for i, t in enumerate(topics)]
    con.insert("docs", {"topic": topics, "body": bodies, "emb": emb})
    return con.table("docs"), emb


def brute(emb, q, k, metric):
    if metric == "l2":
        d = np.sqrt(((emb - q) ** 2).sum(axis=1))
    elif metric == "cosine":
        d = 1 - emb @ q / (np.linalg.norm(emb, axis=1) * np.linalg.norm(q))
    else:
        d = -(emb @ q)
    order = np.argsort(d, kind="stable")[:k]
    return order + 1, d[order]


@pytest.mark.parametrize("metric", ["l2", "cosine", "dot"])
def test_topk_matches_brute_force(docs, metric):
    t, emb = docs
    q = np.array([0.1, -0.2, 0.3, 0.4], dtype=np.float32)
    hits = t.topk("emb", q, k=10, metric=metric)
    ids, dists = brute(emb, q, 10, metric)
    assert hits.ids.dtype == np.uint64 and hits.distances.dtype == np.float32
    assert list(hits.ids) == list(ids)
    np.testing.assert_allclose(hits.distances, dists, rtol=1e-4, atol=1e-5)


def test_batch_topk_and_filter(docs):
    t, emb = docs
    qs = np.eye(4, dtype=np.float32)
    out = t.topk("emb", qs, k=5)
    assert len(out) == 4
    for q, hits in zip(qs, out):
        assert list(hits.ids) == list(brute(emb, q, 5, "l2")[0])
    # The filter selects the candidates before ranking: never under-filled.
    cats = t.topk("emb", qs[0], k=20, where="topic = ?", params=["cats"])
    assert len(cats.ids) == 20
    assert all(i % 2 == 0 for i in cats.ids)  # _id i is row i - 1: odd rows are cats
    mask = np.array([i % 2 == 1 for i in range(500)])
    expect = np.nonzero(mask)[0][np.argsort(np.sqrt(((emb[mask] - qs[0]) ** 2).sum(axis=1)), kind="stable")[:20]] + 1
    assert list(cats.ids) == list(expect)
    with pytest.raises(basalt.DataError):
        t.topk("emb", np.zeros(3), k=1)
    with pytest.raises(ValueError):
        t.topk("emb", np.zeros(4), k=1, metric="manhattan")


def test_full_text_and_hybrid(docs):
    t, emb = docs
    t.create_fts_index(["body"])
    hits = t.search("cats", k=5)
    assert len(hits.ids) == 5
    assert all(i % 2 == 0 for i in hits.ids)
    assert list(hits.distances) == sorted(hits.distances, reverse=True)
    h = t.hybrid_search("dogs", "emb", emb[0], k=3, metric="l2")
    assert h.ids[0] == 1  # row 1 is a dog and its own nearest vector
    got = t.get(list(hits.ids[:2]), ["topic"]).fetchall()
    assert got == [("cats",), ("cats",)]


def test_memory_store_surface(tmp_path):
    con = basalt.connect(tmp_path / "mem.db")
    mem = con.memory("agent", dim=64)
    a = mem.remember("users/ada", "Ada likes green tea", metadata={"kind": "pref", "n": 3})
    b = mem.remember("users/ada", "Ada was born in London", metadata={"kind": "fact", "n": 5})
    assert mem.get(a)["version"] == 1
    assert mem.remember("users/ada", "Ada likes green tea", metadata={"kind": "pref", "n": 3}) == a
    mem.remember("users/bob", "Bob likes coffee", ttl=3600)
    k = mem.put("users/ada", "city", "Ada lives in London")
    assert mem.put("users/ada", "city", "Ada lives in Paris") == k
    assert mem.get_key("users/ada", "city")["text"] == "Ada lives in Paris"
    item = mem.get(a)
    assert item["metadata"] == {"kind": "pref", "n": 3}
    version = item["version"]
    assert len(item["vector"]) == 64
    hits = mem.recall("users/ada", "what tea does Ada like", k=2)
    assert hits[0]["id"] == a and "score" in hits[0]
    only_facts = mem.recall("users", "Ada", k=5, filter={"kind": "fact"})
    assert [h["id"] for h in only_facts] == [b]
    assert [i["id"] for i in mem.list("users/ada", filter={"n": {"$gt": 3}})] == [b]
    assert [i["id"] for i in mem.list("users", filter={"$or": [{"n": 3}, {"kind": {"$eq": "fact"}}]})] == [a, b]
    v = mem.update(a, text="Ada likes jasmine tea", expected_version=version)
    assert v == version + 1
    with pytest.raises(basalt.ConflictError):
        mem.update(a, text="stale", expected_version=version)
    assert [h["version"] for h in mem.history(a)][-1] == v
    assert dict(mem.namespaces()) == {"users/ada": 3, "users/bob": 1}
    with pytest.raises(basalt.DataError):
        mem.remember("users/ada", "")
    with pytest.raises(ValueError):
        mem.list("users", filter={"n": {"$near": 1}})
    sub = mem.subscribe("watcher")
    mem.remember("users/ada", "Ada wrote the first program")
    events = sub.wait(timeout=5)
    assert events and events[-1]["kind"] == "remembered"
    sub.ack(events[-1]["lsn"])
    assert sub.poll() == []
    # Iterating yields what is available now and acknowledges it.
    mem.forget_key("users/ada", "city")
    assert [e["kind"] for e in sub] == ["forgotten"]
    assert list(sub) == []
    assert mem.get_key("users/ada", "city") is None
    assert mem.sweep_expired() == 0  # the one TTL item lives for an hour
    mem.checkpoint("before")
    assert mem.forget(b)
    assert mem.get(b) is None
    mem.restore("before")
    assert mem.get(b) is not None
    assert mem.forget_namespace("users/bob") == 1
    results = mem.remember_many("users/cy", ["one", {"text": "two", "metadata": {"x": 1}}, ""])
    assert isinstance(results[0], int) and isinstance(results[1], int)
    assert isinstance(results[2], basalt.DataError)
    con.close()


def test_memory_with_python_embedder(con):
    calls = []

    def embed(texts):
        calls.append(list(texts))
        return np.array([[len(t), t.count("a"), 1.0] for t in texts], dtype=np.float32)

    mem = con.memory("py", model="toy", dim=3, embedder=embed)
    i = mem.remember("n", "banana")
    assert calls and calls[0] == ["banana"]
    assert mem.get(i)["vector"] == [6.0, 3.0, 1.0]
    assert mem.recall("n", "bandana", k=1, mode="vector")[0]["id"] == i

    def broken(texts):
        raise RuntimeError("model offline")

    bad = con.memory("broken", model="toy2", dim=3, embedder=broken)
    with pytest.raises(basalt.OperationalError, match="model offline"):
        bad.remember("n", "x")
    with pytest.raises(basalt.DataError):
        con.memory("py", model="other", dim=3, embedder=embed)


def test_memory_without_embedder_needs_vectors(con):
    mem = con.memory("raw", model="m", dim=2, embedder=None)
    i = mem.remember("n", "x", vector=np.array([1.0, 0.0]))
    assert mem.recall("n", "x", vector=[1.0, 0.0], k=1, mode="vector")[0]["id"] == i
