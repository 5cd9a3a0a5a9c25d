"""The RFC 9162 tree: known answers from the Certificate Transparency test data, and properties
against a naive implementation written straight from the RFC's recursive definitions."""

from __future__ import annotations

import hashlib

import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from ledger.integrity.merkle import (
    EMPTY_ROOT,
    MerkleTree,
    leaf_hash,
    node_hash,
    root_from_inclusion,
    root_of,
    verify_consistency,
    verify_inclusion,
)

# -- the naive reference: RFC 9162 §2.1.1, §2.1.3.1, §2.1.4.1 as written ----------------------------


def _k(n: int) -> int:
    k = 1
    while k * 2 < n:
        k *= 2
    return k


def ref_mth(d: list[bytes]) -> bytes:
    if not d:
        return hashlib.sha256(b"").digest()
    if len(d) == 1:
        return hashlib.sha256(b"\x00" + d[0]).digest()
    k = _k(len(d))
    return hashlib.sha256(b"\x01" + ref_mth(d[:k]) + ref_mth(d[k:])).digest()


def ref_path(m: int, d: list[bytes]) -> list[bytes]:
    if len(d) == 1:
        return []
    k = _k(len(d))
    if m < k:
        return ref_path(m, d[:k]) + [ref_mth(d[k:])]
    return ref_path(m - k, d[k:]) + [ref_mth(d[:k])]


def ref_subproof(m: int, d: list[bytes], b: bool) -> list[bytes]:
    n = len(d)
    if m == n:
        return [] if b else [ref_mth(d)]
    k = _k(n)
    if m <= k:
        return ref_subproof(m, d[:k], b) + [ref_mth(d[k:])]
    return ref_subproof(m - k, d[k:], False) + [ref_mth(d[:k])]


def ref_proof(m: int, d: list[bytes]) -> list[bytes]:
    return ref_subproof(m, d, True)


# -- known answers -------------------------------------------------------------------------------------

CT_ENTRIES = [bytes.fromhex(h) for h in ("", "00", "10", "2021", "3031", "40414243", "5051525354555657", "606162636465666768696a6b6c6d6e6f")]
CT_ROOTS = [
    "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855",
    "6e340b9cffb37a989ca544e6bb780a2c78901d3fb33738768511a30617afa01d",
    "fac54203e7cc696cf0dfcb42c92a1d9dbaf70ad9e621f4bd8d98662f00e3c125",
    "aeb6bcfe274b70a14fb067a5e5578264db0fa9b51af5e0ba159158f329e06e77",
    "d37ee418976dd95753c1c73862b9398fa2a2cf9b4ff0fdfe8b30cd95209614b7",
    "4e3bbb1f7b478dcfe71fb631631519a3bca12c9aefca1612bfce4c13a86264d4",
    "76e67dadbcdf1e10e1b74ddc608abd2f98dfb16fbce75277b5232a127f2087ef",
    "ddb89be403809e325750d3d263cd78929c2942b7942a34b77e122c9594a74c8c",
    "5dc9da79a70659a9ad559cb701ded9a2ab9d823aad2f4960cfe370eff4604328",
]
CT_INCLUSION = {
    (0, 8): ["96a296d224f285c67bee93c30f8a309157f0daa35dc5b87e410b78630a09cfc7",
             "5f083f0a1a33ca076a95279832580db3e0ef4584bdff1f54c8a360f50de3031e",
             "6b47aaf29ee3c2af9af889bc1fb9254dabd31177f16232dd6aab035ca39bf6e4"],
    (5, 8): ["bc1a0643b12e4d2d7c77918f44e0f4f79a838b6cf9ec5b5c283e1f4d88599e6b",
             "ca854ea128ed050b41b35ffc1b87b8eb2bde461e9e3b5596ece6b9d5975a0ae0",
             "d37ee418976dd95753c1c73862b9398fa2a2cf9b4ff0fdfe8b30cd95209614b7"],
}
CT_CONSISTENCY = {
    (2, 8): ["5f083f0a1a33ca076a95279832580db3e0ef4584bdff1f54c8a360f50de3031e",
             "6b47aaf29ee3c2af9af889bc1fb9254dabd31177f16232dd6aab035ca39bf6e4"],
    (6, 8): ["0ebc5d3437fbe2db158b9f126a1d118e308181031d0a949f8dededebc558ef6a",
             "ca854ea128ed050b41b35ffc1b87b8eb2bde461e9e3b5596ece6b9d5975a0ae0",
             "d37ee418976dd95753c1c73862b9398fa2a2cf9b4ff0fdfe8b30cd95209614b7"],
}


def test_empty_tree_hash_is_sha256_of_the_empty_string() -> None:
    assert EMPTY_ROOT.hex() == "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"
    assert MerkleTree().root() == EMPTY_ROOT == root_of([])


def test_leaf_and_node_hashes_use_the_rfc_prefixes() -> None:
    assert leaf_hash(b"") == hashlib.sha256(b"\x00").digest()
    a, b = leaf_hash(b"a"), leaf_hash(b"b")
    assert node_hash(a, b) == hashlib.sha256(b"\x01" + a + b).digest() != node_hash(b, a)


def test_roots_match_the_certificate_transparency_test_data() -> None:
    tree = MerkleTree.of_entries(CT_ENTRIES)
    for size, expected in enumerate(CT_ROOTS):
        assert tree.root(size).hex() == expected, f"size {size}"
        assert root_of([leaf_hash(e) for e in CT_ENTRIES[:size]]).hex() == expected


@pytest.mark.parametrize(("index", "size"), sorted(CT_INCLUSION))
def test_inclusion_proofs_match_the_test_data(index: int, size: int) -> None:
    tree = MerkleTree.of_entries(CT_ENTRIES)
    path = tree.inclusion_proof(index, size)
    assert [h.hex() for h in path] == CT_INCLUSION[(index, size)]
    assert verify_inclusion(tree.leaf(index), index, size, path, bytes.fromhex(CT_ROOTS[size]))


@pytest.mark.parametrize(("first", "second"), sorted(CT_CONSISTENCY))
def test_consistency_proofs_match_the_test_data(first: int, second: int) -> None:
    tree = MerkleTree.of_entries(CT_ENTRIES)
    proof = tree.consistency_proof(first, second)
    assert [h.hex() for h in proof] == CT_CONSISTENCY[(first, second)]
    assert verify_consistency(first, second, bytes.fromhex(CT_ROOTS[first]), bytes.fromhex(CT_ROOTS[second]), proof)


def test_degenerate_consistency_cases() -> None:
    tree = MerkleTree.of_entries(CT_ENTRIES)
    r4, r5, r8 = tree.root(4), tree.root(5), tree.root(8)
    assert verify_consistency(4, 4, r4, r4, [])
    assert not verify_consistency(4, 4, r4, r5, [])
    assert not verify_consistency(4, 4, r4, r4, [r4])
    assert verify_consistency(0, 8, EMPTY_ROOT, r8, [])
    assert not verify_consistency(0, 8, r4, r8, [])
    assert not verify_consistency(5, 4, r5, r4, tree.consistency_proof(4, 5))
    assert not verify_consistency(3, 8, tree.root(3), r8, [])


def test_out_of_range_requests_are_refused() -> None:
    tree = MerkleTree.of_entries(CT_ENTRIES)
    for bad in (lambda: tree.root(9), lambda: tree.inclusion_proof(8, 8), lambda: tree.inclusion_proof(0, 9),
                lambda: tree.inclusion_proof(-1, 8), lambda: tree.consistency_proof(5, 3), lambda: tree.consistency_proof(0, 9)):
        with pytest.raises(ValueError):
            bad()
    with pytest.raises(ValueError):
        MerkleTree([b"short"])


# -- properties ----------------------------------------------------------------------------------------

# Distinct entries: with duplicates, "another index" can legitimately hold the same leaf.
entries = st.lists(st.binary(max_size=12), min_size=1, max_size=70, unique=True)


@settings(max_examples=150, deadline=None)
@given(entries)
def test_roots_at_every_size_agree_with_the_reference(data: list[bytes]) -> None:
    tree = MerkleTree.of_entries(data)
    grown = MerkleTree()
    for n, entry in enumerate(data, 1):
        grown.append(entry)
        assert grown.root() == ref_mth(data[:n])
    for n in range(len(data) + 1):
        assert tree.root(n) == ref_mth(data[:n])


@settings(max_examples=150, deadline=None)
@given(entries, st.data())
def test_inclusion_proofs_agree_with_the_reference_and_verify(data: list[bytes], draw: st.DataObject) -> None:
    tree = MerkleTree.of_entries(data)
    size = draw.draw(st.integers(1, len(data)), label="size")
    index = draw.draw(st.integers(0, size - 1), label="index")
    path = tree.inclusion_proof(index, size)
    assert path == ref_path(index, data[:size])
    root = ref_mth(data[:size])
    leaf = leaf_hash(data[index])
    assert verify_inclusion(leaf, index, size, path, root)
    assert root_from_inclusion(leaf, index, size, path) == root
    # Anything else must fail: another leaf, index or size, a changed, shortened or longer path.
    assert not verify_inclusion(leaf_hash(data[index] + b"x"), index, size, path, root)
    if size > 1:
        assert not verify_inclusion(leaf, (index + 1) % size, size, path, root)
        assert not verify_inclusion(leaf, index, size, path[:-1], root)
        flipped = list(path)
        flipped[-1] = bytes([flipped[-1][0] ^ 1]) + flipped[-1][1:]
        assert not verify_inclusion(leaf, index, size, flipped, root)
    assert not verify_inclusion(leaf, index, size, path + [EMPTY_ROOT], root)
    if size < len(data):  # the path for one size does not prove inclusion in the next tree
        assert not verify_inclusion(leaf, index, size + 1, path, ref_mth(data[: size + 1]))
    assert not verify_inclusion(leaf, size, size, path, root)


@settings(max_examples=150, deadline=None)
@given(entries, st.data())
def test_consistency_proofs_agree_with_the_reference_and_verify(data: list[bytes], draw: st.DataObject) -> None:
    tree = MerkleTree.of_entries(data)
    second = draw.draw(st.integers(1, len(data)), label="second")
    first = draw.draw(st.integers(0, second), label="first")
    proof = tree.consistency_proof(first, second)
    if 0 < first < second:
        assert proof == ref_proof(first, data[:second])
    r1, r2 = ref_mth(data[:first]), ref_mth(data[:second])
    assert verify_consistency(first, second, r1, r2, proof)
    if 0 < first < second:
        assert not verify_consistency(first, second, r1, r2, proof[:-1])
        assert not verify_consistency(first, second, r1, r2, proof + [EMPTY_ROOT])
        flipped = list(proof)
        flipped[0] = bytes([flipped[0][0] ^ 0x80]) + flipped[0][1:]
        assert not verify_consistency(first, second, r1, r2, flipped)
        assert not verify_consistency(first, second, r2, r1, proof)


@settings(max_examples=150, deadline=None)
@given(entries, st.data())
def test_a_rewritten_prefix_is_never_consistent(data: list[bytes], draw: st.DataObject) -> None:
    """A fork: same size or longer, but an entry before ``first`` differs."""
    second = draw.draw(st.integers(1, len(data)), label="second")
    first = draw.draw(st.integers(1, second), label="first")
    changed = draw.draw(st.integers(0, first - 1), label="changed")
    forked = list(data[:second])
    forked[changed] = forked[changed] + b"!"
    assume(forked[changed] != data[changed])
    fork_tree = MerkleTree.of_entries(forked)
    honest_first_root = ref_mth(data[:first])
    proof = fork_tree.consistency_proof(first, second)
    assert not verify_consistency(first, second, honest_first_root, fork_tree.root(second), proof)
