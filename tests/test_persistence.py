"""Saved constraints (``constraint.save``, ``constrain.load``) and the on-disk
cache of ``Compiler(cache_dir=...)``: a loaded constraint behaves exactly as
the saved one (masks, accepts, states, budgets); a file that is missing,
truncated, corrupted, stale or for another vocabulary is refused with a
:class:`CacheFileError`, and a cache entry like it is rebuilt; threads and
processes share a cache folder."""

from __future__ import annotations

import collections
import multiprocessing
import os
import threading
from pathlib import Path

import numpy as np
import pytest

import constrain
from constrain import CacheFileError, Compiler, persist
from constrain.cfg.lexer import LexerTables
from constrain.persist import DiskCache, Payload
from byte_vocab import accepts, byte_vocabulary
import persist_testing as pt


@pytest.fixture(scope="module")
def kinds():
    return pt.constraints()


@pytest.mark.parametrize("name", ["regex", "choice", "lark", "json_schema", "response_format",
                                  "reasoning"])
def test_loaded_behaves_as_compiled(kinds, name, tmp_path):
    c, text = kinds[name]
    pt.walk(c, 11, 15)  # some masks computed: they are saved too
    path = tmp_path / "c.trellis"
    c.save(path)
    loaded = constrain.load(path, c.vocab)
    assert type(loaded) is type(c)
    assert pt.same_walks(c, loaded)
    # and as a fresh compile of the same input, which computed nothing yet
    fresh = pt.constraints(byte_vocabulary())[name][0]
    assert pt.same_walks(fresh, loaded, seeds=[5])
    data = text.encode()
    assert loaded.accepts_tokens(list(data)) and loaded.accepts_tokens(list(data) + [256])
    assert not loaded.accepts_tokens(list(data[:-1]) + [ord("\x00")])


@pytest.mark.parametrize("name", ["regex", "lark", "json_schema", "reasoning"])
@pytest.mark.parametrize("wrap", [bytes, memoryview, bytearray])
def test_loads_takes_what_dumps_gives(kinds, name, wrap):
    """dumps gives bytes; loads over them built read-only tables, which the
    grammar kernels refused at the first mask (a numba TypingError)."""
    c, _ = kinds[name]
    loaded = persist.loads(wrap(persist.dumps(c)), c.vocab)
    assert pt.same_walks(c, loaded, seeds=[3])
    with pytest.raises(constrain.ConstraintError, match="compiler is for"):
        persist.loads(persist.dumps(c), c.vocab, compiler=Compiler(byte_vocabulary((b"zz",))))


def test_states_of_the_saved_constraint_stay_valid(kinds, tmp_path):
    g, _ = kinds["json_schema"]
    masks, states = pt.walk(g, 3, 25)
    g.save(tmp_path / "g.trellis")
    loaded = constrain.load(tmp_path / "g.trellis", g.vocab)
    for m, s in zip(masks, states):
        assert np.array_equal(loaded.allowed_token_ids(s), m)
        assert np.array_equal(pt.bitmask_of(loaded, s), pt.bitmask_of(g, s))
    # the walks go on alike from the last state
    ma, _ = pt.walk(g, 4, 20, start=states[-1])
    mb, _ = pt.walk(loaded, 4, 20, start=states[-1])
    assert all(np.array_equal(x, y) for x, y in zip(ma, mb))


def test_restored_objects_have_every_attribute(kinds, tmp_path):
    """A restore builds the objects without their constructors: it must set
    what they set (a field added to a constructor and not to its restore
    would fail here)."""
    g, _ = kinds["lark"]
    loaded = persist.loads(bytearray(persist.dumps(g)), g.vocab)
    for a, b in ((g, loaded), (g.lexer, loaded.lexer), (g.parser, loaded.parser),
                 (g.terms, loaded.terms)):
        assert set(vars(a)) == set(vars(b)), type(a).__name__
    r, _ = kinds["regex"]
    loaded = persist.loads(bytearray(persist.dumps(r)), r.vocab)
    assert set(vars(r)) == set(vars(loaded))
    assert set(vars(r.tokens)) == set(vars(loaded.tokens))
    assert loaded.tokens.max_mask_bytes == r.tokens.max_mask_bytes


def test_budgets_travel(tmp_path):
    v = pt.vocab()
    g = Compiler(v, limits=constrain.Limits(max_width=7, max_contexts=99)).compile_grammar(pt.GRAMMAR)
    g.save(tmp_path / "g.trellis")
    loaded = constrain.load(tmp_path / "g.trellis", v)
    assert loaded.max_width == 7 and loaded.parser.max_contexts == 99
    assert loaded._max_masks == g._max_masks and loaded.lexer.max_states == g.lexer.max_states


def test_lazy_rows_regex(tmp_path):
    """Past max_mask_bytes rows are computed on first visit: not saved, and
    computed again after loading."""
    v = pt.vocab()
    r = constrain.compile_regex(r"[a-z]{2,30}@[a-z]{2,20}\.(com|org)", v, max_mask_bytes=400)
    assert not r.tokens.eager
    pt.walk(r, 1)
    r.save(tmp_path / "r.trellis")
    loaded = constrain.load(tmp_path / "r.trellis", v)
    assert not loaded.tokens.eager and pt.same_walks(r, loaded)


def test_python_type(tmp_path):
    pydantic = pytest.importorskip("pydantic")

    class Point(pydantic.BaseModel):
        x: int
        y: int

    v = pt.vocab()
    c = constrain.compile_type(Point, v)
    c.save(tmp_path / "p.trellis")
    loaded = constrain.load(tmp_path / "p.trellis", v)
    assert pt.same_walks(c, loaded) and accepts(loaded, '{"x":1,"y":-2}')
    # the file holds no Python type (loading runs no code): attach it again
    assert not hasattr(loaded, "output_type")
    loaded.output_type = constrain.OutputType(Point)
    assert constrain.parse_output(loaded, '{"x":1,"y":2}') == Point(x=1, y=2)


def test_real_vocabulary(smollm2_vocab, tmp_path):
    g = constrain.compile_json_schema(pt.SCHEMA, smollm2_vocab)
    g.save(tmp_path / "g.trellis")
    loaded = constrain.load(tmp_path / "g.trellis", smollm2_vocab)
    assert pt.same_walks(g, loaded, seeds=[0, 1], steps=30)
    r = constrain.compile_regex(r"[0-9]{3}-[0-9]{4}", smollm2_vocab)
    r.save(tmp_path / "r.trellis")
    assert pt.same_walks(r, constrain.load(tmp_path / "r.trellis", smollm2_vocab), seeds=[0])


# -- refused files -------------------------------------------------------------------


@pytest.fixture(scope="module")
def saved(kinds, tmp_path_factory):
    path = tmp_path_factory.mktemp("saved") / "g.trellis"
    kinds["json_schema"][0].save(path)
    return path


def _reason(path, vocab=None):
    with pytest.raises(CacheFileError) as e:
        constrain.load(path, vocab or pt.vocab())
    return e.value.reason


def test_missing_and_not_a_file(tmp_path):
    assert _reason(tmp_path / "nothing.trellis") == "missing"
    assert _reason(tmp_path) == "missing"  # a folder
    (tmp_path / "x.trellis").write_bytes(b"{not a constraint}")
    assert _reason(tmp_path / "x.trellis") == "corrupt"
    (tmp_path / "empty.trellis").write_bytes(b"")
    assert _reason(tmp_path / "empty.trellis") == "truncated"


def test_truncated_anywhere(saved, tmp_path):
    data = saved.read_bytes()
    for cut in [3, 8, 15, 100, len(data) // 2, len(data) - 33, len(data) - 1]:
        p = tmp_path / f"cut{cut}.trellis"
        p.write_bytes(data[:cut])
        assert _reason(p) in ("truncated", "corrupt"), cut
    p = tmp_path / "long.trellis"
    p.write_bytes(data + b"\0")
    assert _reason(p) == "corrupt"


def test_corrupted_anywhere(saved, tmp_path):
    data = saved.read_bytes()
    rng = np.random.default_rng(0)
    offsets = [0, 9, 13, 20, 200] + rng.integers(0, len(data), 40).tolist() + [len(data) - 1]
    for off in offsets:
        bad = bytearray(data)
        bad[off] ^= 0x41
        p = tmp_path / "bad.trellis"
        p.write_bytes(bytes(bad))
        assert _reason(p) in ("corrupt", "format", "truncated"), off


def test_other_vocabulary_version_and_format(saved, tmp_path, monkeypatch):
    other = byte_vocabulary((b"ab",))
    assert _reason(saved, other) == "vocabulary"
    data = bytearray(saved.read_bytes())
    data[8] += 1  # the format version
    (tmp_path / "f.trellis").write_bytes(bytes(data))
    assert _reason(tmp_path / "f.trellis") == "format"
    monkeypatch.setattr(persist, "trellis_version", lambda: "0.0.0+other")
    assert _reason(saved) == "version"


def test_inconsistent_tables_are_refused(kinds, tmp_path, monkeypatch):
    """A file with a valid checksum whose tables do not fit together (what a
    bug in a writer could produce) is refused, not trusted: the kernels index
    with those numbers."""
    g, _ = kinds["json_schema"]
    pt.walk(g, 1, 30)
    original = persist.persist

    def tamper(name, change):
        def persisted(constraint, payload):
            kind = original(constraint, payload)
            change(payload.arrays, payload.meta, name)
            return kind

        monkeypatch.setattr(persist, "persist", persisted)
        data = persist.dumps(g)
        monkeypatch.setattr(persist, "persist", original)
        return data

    def big(arrays, meta, name):
        a = arrays[name].copy()
        a.reshape(-1)[-1] = 10 ** 6
        arrays[name] = a

    def drop(arrays, meta, name):
        del arrays[name]

    def retype(arrays, meta, name):
        arrays[name] = arrays[name].astype(np.int64)

    def every(value):
        def change(arrays, meta, name):
            a = arrays[name].copy()
            a.reshape(-1)[:] = value
            arrays[name] = a
        return change

    def huge_capacity(arrays, meta, name):
        meta[name + "#cap"] = 2 ** 40  # np.full of 2**40 rows was a MemoryError

    def one_free_slot(arrays, meta, name):
        # entries (any state's id) in every slot but one: the table is full
        # after the next new entry, and a look-up that misses never ends
        a = arrays[name].copy()
        a[np.flatnonzero(a < 0)[1:]] = 0
        arrays[name] = a

    def odd_capacity(arrays, meta, name):
        # every table of the lexer's states with room for 1,500: its state
        # table (3,000 slots) is not a power of two, which the probes mask
        for field, *_ in LexerTables._PER_STATE:
            meta[f"lexer.{field}#cap"] = 1500
        meta["lexer.poff#cap"] = 1501
        a = np.full(3000, -1, dtype=np.int64)
        a[:arrays[name].shape[0]] = arrays[name]
        arrays[name] = a

    # the Earley recognizer's tables: its kernels index with them unchecked
    # (pred_rd past the dotted rules was a segfault in a walk)
    earley = [(f"parser.{name}", every(v)) for name in
              ("rd_next", "lhs_rd", "lhs_off", "pred_rd", "pred_sym", "pred_off", "c_ioff",
               "c_roff", "roots", "htab") for v in (2 ** 62, -5)]
    cases = [("terms.table", big), ("lexer.trans", big), ("parser.next", big),
             ("ctx_start", big), ("lexer.walk_state", big), ("mask_configs", big),
             ("parser.c_exp", drop), ("lexer.pairs", retype), ("parser.items", huge_capacity),
             ("parser.pred_rd", huge_capacity), ("parser.nullable", every(True)),
             ("parser.htab", every(0)),  # no free slot: a lookup would never end
             ("parser.htab", one_free_slot), ("lexer._htab", every(0)),
             ("lexer._htab", one_free_slot), ("lexer._htab", odd_capacity), *earley]
    for name, change in cases:
        data = tamper(name, change)
        try:
            persist.loads(bytearray(data), g.vocab)
        except CacheFileError as e:
            assert e.reason == "corrupt", name
        else:
            raise AssertionError(f"{name} changed and the file was loaded")


def test_load_takes_a_vocabulary(saved):
    with pytest.raises(constrain.ConstraintError):
        constrain.load(saved, "bytes")


def test_payload_refuses_object_arrays():
    with pytest.raises(TypeError):
        Payload().put("x", np.array([object()]))


# -- the on-disk cache ---------------------------------------------------------------


def _entries(folder) -> list[Path]:
    return sorted(Path(folder).glob("*.trellis"))


def test_cache_miss_then_hit(tmp_path):
    v = pt.vocab()
    a = Compiler(v, cache_dir=tmp_path)
    g = a.compile_json_schema(pt.SCHEMA)
    r = a.compile_regex(pt.REGEX)
    l = a.compile_grammar(pt.GRAMMAR)
    assert a.disk_cache.stats().misses == 3 and a.disk_cache.stats().writes == 3
    assert len(_entries(tmp_path)) == 3
    b = Compiler(v, cache_dir=tmp_path)  # another process, as far as caches go
    g2, r2, l2 = (b.compile_json_schema(pt.SCHEMA), b.compile_regex(pt.REGEX),
                  b.compile_grammar(pt.GRAMMAR))
    assert b.disk_cache.stats().hits == 3 and b.disk_cache.stats().misses == 0
    for x, y in ((g, g2), (r, r2), (l, l2)):
        assert pt.same_walks(x, y)
    # the loaded grammar uses the compiler it was loaded by, and had its
    # first mask saved: filling it computes nothing
    assert g2.compiler is b and g2.has_cached_mask(g2.initial_state())


def test_cache_keys(tmp_path):
    v = pt.vocab()
    c = Compiler(v, cache_dir=tmp_path)
    c.compile_json_schema(pt.SCHEMA)
    c.compile_json_schema(pt.SCHEMA, time_budget=60.0)  # the same result
    assert c.disk_cache.stats().hits == 1
    reordered = dict(reversed(list(pt.SCHEMA.items())))  # same keys, other order: its own
    c.compile_json_schema(reordered)
    c.compile_json_schema(pt.SCHEMA, whitespace="flexible")
    c.compile_json_schema(pt.SCHEMA, max_width=9)
    c.compile_regex(pt.REGEX)
    c.compile_regex(pt.REGEX, flags=2)
    c.compile_grammar(pt.GRAMMAR, "expr")
    assert c.disk_cache.stats().misses == 7
    Compiler(byte_vocabulary((b"ab",)), cache_dir=tmp_path).compile_regex(pt.REGEX)
    assert len(_entries(tmp_path)) == 8


def test_grammar_files_and_their_imports(tmp_path):
    folder = tmp_path / "g"
    folder.mkdir()
    (folder / "words.lark").write_text('WORD: "hi" | "yo"\n')
    main = folder / "main.lark"
    main.write_text("start: WORD (\",\" WORD)*\n%import .words.WORD\n")
    c = Compiler(pt.vocab(), cache_dir=tmp_path / "cache")
    assert accepts(c.compile_grammar(main), "hi,yo")
    assert accepts(c.compile_grammar(str(main)), "hi,yo")
    assert c.disk_cache.stats().hits == 1
    (folder / "words.lark").write_text('WORD: "hey"\n')  # an import changed: a new key
    g = c.compile_grammar(main)
    assert c.disk_cache.stats().misses == 2 and accepts(g, "hey") and not accepts(g, "hi")


def test_uncacheable_inputs_compile(tmp_path):
    c = Compiler(pt.vocab(), cache_dir=tmp_path)
    # a dict subclass: not plainly JSON (its text could stand for another input)
    g = c.compile_json_schema(collections.OrderedDict(enum=["a", "b"]))
    assert accepts(g, '"a"') and c.disk_cache.stats().uncacheable == 1
    with pytest.raises(constrain.SchemaError):
        c.compile_json_schema("{not json")
    with pytest.raises(constrain.RegexSyntaxError):
        c.compile_regex("(")
    assert _entries(tmp_path) == []


def test_corrupt_entry_is_detected_and_rebuilt(tmp_path):
    v = pt.vocab()
    c = Compiler(v, cache_dir=tmp_path)
    g = c.compile_json_schema(pt.SCHEMA)
    (entry,) = _entries(tmp_path)
    good = entry.read_bytes()
    for damage in (lambda d: d[:len(d) // 3],                      # truncated
                   lambda d: d[:500] + bytes([d[500] ^ 1]) + d[501:],  # a flipped bit
                   lambda d: b"",
                   lambda d: persist.dumps(c.compile_regex("x"))):  # another key's file
        entry.write_bytes(damage(good))
        fresh = Compiler(v, cache_dir=tmp_path)
        g2 = fresh.compile_json_schema(pt.SCHEMA)
        s = fresh.disk_cache.stats()
        assert (s.rejected, s.misses, s.writes, s.hits) == (1, 1, 1, 0)
        assert pt.same_walks(g, g2)
        assert entry.read_bytes() != damage(good)
        persist.loads(bytearray(entry.read_bytes()), v)  # valid again
    stale = Compiler(v, cache_dir=tmp_path)
    key = stale.disk_cache.key("json_schema", persist.schema_spec(pt.SCHEMA, {}, stale.limits), v)
    assert stale.disk_cache.path(key) == entry


def test_failed_write_still_compiles(tmp_path, monkeypatch):
    def fail(path, data):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(persist, "write_atomic", fail)
    c = Compiler(pt.vocab(), cache_dir=tmp_path)
    assert accepts(c.compile_regex(pt.REGEX), "12.5")
    assert c.disk_cache.stats().write_errors == 1 and _entries(tmp_path) == []


def test_cache_dir_deleted_in_use_is_made_again(tmp_path):
    import shutil

    c = Compiler(pt.vocab(), cache_dir=tmp_path / "cache")
    c.compile_regex(pt.REGEX)
    shutil.rmtree(tmp_path / "cache")  # a clean-up while the server runs
    c.compile_regex("[a-c]+")
    assert c.disk_cache.stats().write_errors == 0 and len(_entries(tmp_path / "cache")) == 1


def test_another_python_or_unicode_is_another_version(monkeypatch):
    # \w and case folding are read off this Python's re: a file written under
    # another Unicode version holds other automata
    import unicodedata

    mine = persist.trellis_version.__wrapped__()
    monkeypatch.setattr(unicodedata, "unidata_version", "99.0.0")
    assert persist.trellis_version.__wrapped__() != mine


def test_cache_dir_is_made_and_checked(tmp_path):
    Compiler(pt.vocab(), cache_dir=tmp_path / "a" / "b")
    assert (tmp_path / "a" / "b").is_dir()
    (tmp_path / "file").write_text("")
    with pytest.raises(constrain.ConstraintError):
        Compiler(pt.vocab(), cache_dir=tmp_path / "file" / "sub")


def test_threads_share_one_compile(tmp_path):
    """Threads asking a shared compiler for the same schema at once: one
    compiles, the others wait and load its entry."""
    v = pt.vocab()
    c = Compiler(v, cache_dir=tmp_path)
    out, errors = [None] * 6, []
    barrier = threading.Barrier(len(out))

    def run(i):
        try:
            barrier.wait()
            out[i] = c.compile_json_schema(pt.SCHEMA)
        except Exception as e:  # noqa: BLE001 - reported below
            errors.append(e)

    threads = [threading.Thread(target=run, args=(i,)) for i in range(len(out))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors
    s = c.disk_cache.stats()
    assert (s.misses, s.hits, s.writes) == (1, len(out) - 1, 1)
    assert all(pt.same_walks(out[0], g, seeds=[0]) for g in out[1:])


def _compile_in_process(folder, queue):
    import persist_testing

    c = Compiler(persist_testing.vocab(), cache_dir=folder)
    g = c.compile_json_schema(persist_testing.SCHEMA)
    masks, _ = persist_testing.walk(g, 7, 30)
    queue.put((np.concatenate(masks).tolist(), c.disk_cache.stats().hits))


def test_processes_share_a_folder(tmp_path):
    """Processes compiling one schema into one folder at once: each gets a
    correct constraint, and the entry left is whole."""
    ctx = multiprocessing.get_context("spawn")
    queue = ctx.Queue()
    procs = [ctx.Process(target=_compile_in_process, args=(str(tmp_path), queue)) for _ in range(3)]
    for p in procs:
        p.start()
    results = [queue.get(timeout=120) for _ in procs]
    for p in procs:
        p.join(timeout=60)
        assert p.exitcode == 0
    g = constrain.compile_json_schema(pt.SCHEMA, pt.vocab())
    expected = np.concatenate(pt.walk(g, 7, 30)[0]).tolist()
    assert all(masks == expected for masks, _ in results)
    (entry,) = _entries(tmp_path)
    assert not [p for p in os.listdir(tmp_path) if p.startswith(".tmp-")]
    loaded = persist.loads(bytearray(entry.read_bytes()), pt.vocab())
    assert pt.same_walks(g, loaded, seeds=[7])


def test_disk_cache_repr_and_key_inputs(tmp_path):
    d = DiskCache(tmp_path)
    assert str(tmp_path) in repr(d)
    v = pt.vocab()
    assert d.key("regex", {"pattern": "a"}, v) != d.key("regex", {"pattern": "b"}, v)
    assert d.key("regex", {"pattern": "a"}, v) != d.key("grammar", {"pattern": "a"}, v)
    with pytest.raises(persist.Uncacheable):
        d.key("regex", {"pattern": ("a",)}, v)
    with pytest.raises(persist.Uncacheable):
        d.key("regex", {1: "a"}, v)


def test_saved_files_follow_the_umask(tmp_path):
    """mkstemp makes 0600: in a cache folder two users share, each missed the
    other's entries, rewrote them and took them over."""
    c = constrain.compile_regex("[0-9]+", constrain.Vocabulary.from_tokens(
        [bytes([b]) for b in range(256)] + [b"</s>"], eos_token_ids=[256]))
    old = os.umask(0o022)
    try:
        c.save(tmp_path / "c.trellis")
    finally:
        os.umask(old)
    assert (tmp_path / "c.trellis").stat().st_mode & 0o777 == 0o644


@pytest.mark.parametrize("mask", [0o022, 0o077, 0o002, 0o027])
def test_the_umask_is_read_without_proc_and_left_alone(monkeypatch, mask):
    """Without /proc the umask was set and restored: a file another thread made
    in that window got 0o022's mode. It is now read off a probe folder's mode."""
    import builtins

    real_open = builtins.open

    def no_proc(file, *args, **kwargs):
        if str(file).startswith("/proc/"):
            raise FileNotFoundError(file)
        return real_open(file, *args, **kwargs)

    old = os.umask(mask)
    try:
        monkeypatch.setattr(builtins, "open", no_proc)
        set_to = []
        real_umask = os.umask
        monkeypatch.setattr(os, "umask", lambda m: set_to.append(m) or real_umask(m))
        assert persist.process_umask() == mask
        assert set_to == []
    finally:
        monkeypatch.undo()
        os.umask(old)
