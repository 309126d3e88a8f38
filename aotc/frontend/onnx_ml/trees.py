"""Tree ensembles (TreeEnsembleRegressor, TreeEnsembleClassifier, TreeEnsemble) as gathers.

Every tree is walked at once, one level per step: the current node of each (row, tree) pair
is an index into tables of the whole forest (feature, threshold, next node when the test holds
and when it does not), so a level is a few `Gather`s, one `GatherElements` from the input and
one comparison, and the walk is unrolled to the deepest tree's depth; a tree leaves the walk
after its own depth (the trees go deepest first, so those still walking are a prefix). A leaf
points to itself, so a walk that reached one stays there. The leaves' weights form one [nodes, outputs] table
gathered at the end and summed (or averaged, or the minimum or maximum taken) over the trees.

This is the tree-traversal formulation (as in Hummingbird): exact, since each step only
compares and moves, and made of operators aotc already compiles. Its cost is rows x the sum
of the trees' depths in gathers: a row pays its tree's deepest path even where it reaches a
shallow leaf, which costs most in the unbalanced trees that leaf-wise growth (LightGBM)
makes.

The classifier reproduces onnxruntime's treatment of two classes (its binary case, the
"second class" written from the single score, the positive-label rule) for forests whose
leaves give the same classes a score in every row, which is how scikit-learn, LightGBM and
XGBoost converters write them; a forest where it depends on the row is refused.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import onnx_ir as ir

from aotc.frontend.onnx_ml.attrs import Attrs
from aotc.frontend.onnx_ml.body import Body
from aotc.frontend.onnx_ml.scores import apply_transform, transform_name, two_scores

_MODES = ("BRANCH_LEQ", "BRANCH_LT", "BRANCH_GTE", "BRANCH_GT", "BRANCH_EQ", "BRANCH_NEQ")
_COMPARE = {"BRANCH_LEQ": "LessOrEqual", "BRANCH_LT": "Less", "BRANCH_GTE": "GreaterOrEqual",
            "BRANCH_GT": "Greater", "BRANCH_EQ": "Equal"}
_MEMBER = "BRANCH_MEMBER"  # (TreeEnsemble, opset 5: the feature is one of a set of values)
_AGGREGATES = ("AVERAGE", "SUM", "MIN", "MAX")
# the deepest walk unrolled (each level is six nodes of the expanded graph)
MAX_DEPTH = 64


@dataclass
class Forest:
    """One ensemble's tables, every node of every tree numbered in one global index."""

    feature: np.ndarray      # [G] int64 (0 at leaves)
    threshold: np.ndarray    # [G] float32 (0 at leaves)
    modes: list[str]         # [G] a BRANCH_* mode or LEAF
    on_true: np.ndarray      # [G] int64: the next node when the test holds (a leaf: itself)
    on_false: np.ndarray     # [G] int64
    missing_true: np.ndarray  # [G] bool: a NaN feature takes the true branch
    roots: np.ndarray        # [T] int64
    weights: np.ndarray      # [G, K] float32: the summed leaf weights per output
    scored: np.ndarray       # [G, K] bool: the leaf names that output
    tree: np.ndarray         # [G] int64: the tree of each node
    depths: np.ndarray       # [T] the most tests on any path from each root to a leaf
    members: np.ndarray | None = None  # [G, M]: each BRANCH_MEMBER node's set, NaN-padded

    @property
    def leaf(self) -> np.ndarray:
        """[G] bool: the leaves."""
        return np.array([m == "LEAF" for m in self.modes])


def _walk_depths(attrs: Attrs, forest_next: tuple[np.ndarray, np.ndarray], leaf: np.ndarray,
                 roots: np.ndarray) -> np.ndarray:
    """[T] each tree's depth (its longest path in tests), refusing cycles and deep trees."""
    on_true, on_false = forest_next
    depths = np.zeros(len(roots), np.int64)
    for t, root in enumerate(roots):
        depth, level, seen = 0, {int(root)}, set()
        while inner := {n for n in level if not leaf[n]}:
            if inner & seen or depth >= MAX_DEPTH:
                raise attrs.refuse(f"a tree is deeper than {MAX_DEPTH} levels or has a cycle",
                                   hint="aotc unrolls the walk to the deepest tree: train "
                                        f"with a maximum depth of at most {MAX_DEPTH}")
            seen |= inner
            depth += 1
            level = {int(on_true[n]) for n in inner} | {int(on_false[n]) for n in inner}
        depths[t] = depth
    return depths


def _legacy_forest(attrs: Attrs, prefix: str, outputs: int) -> Forest:
    """The tables of TreeEnsembleRegressor (`prefix` 'target') or TreeEnsembleClassifier
    ('class'): nodes named by (tree id, node id)."""
    tree_ids = attrs.array("nodes_treeids", np.int64)
    node_ids = attrs.array("nodes_nodeids", np.int64)
    count = len(tree_ids)
    if not count or len(node_ids) != count:
        raise attrs.refuse("nodes_treeids and nodes_nodeids must be non-empty, of one length")
    index = {(int(t), int(n)): g for g, (t, n) in enumerate(zip(tree_ids, node_ids, strict=True))}
    if len(index) != count:
        raise attrs.refuse("two nodes share a (tree id, node id)")
    modes = [m.decode() if isinstance(m, bytes) else str(m)
             for m in (attrs.get("nodes_modes") or [])]
    if len(modes) != count:
        raise attrs.refuse("nodes_modes must give every node a mode")
    for m in set(modes) - {"LEAF"}:
        if m not in _MODES:
            raise attrs.refuse(f"node mode {m} is not supported")
    leaf = np.array([m == "LEAF" for m in modes])

    def per_node(name: str, dtype, default) -> np.ndarray:
        values = attrs.array(name, dtype)
        if not len(values):
            return np.full(count, default, dtype)
        if len(values) != count:
            raise attrs.refuse(f"{name} has {len(values)} entries for {count} nodes")
        return values

    feature = np.where(leaf, 0, per_node("nodes_featureids", np.int64, 0))
    threshold = np.where(leaf, 0, per_node("nodes_values", np.float32, 0)).astype(np.float32)
    missing = per_node("nodes_missing_value_tracks_true", np.int64, 0).astype(bool) & ~leaf
    children = []
    for name in ("nodes_truenodeids", "nodes_falsenodeids"):
        ids = per_node(name, np.int64, 0)
        nxt = np.arange(count, dtype=np.int64)
        for g in np.flatnonzero(~leaf):
            key = (int(tree_ids[g]), int(ids[g]))
            if key not in index:
                raise attrs.refuse(f"node {int(node_ids[g])} of tree {int(tree_ids[g])} "
                                   f"points to node {int(ids[g])}, which does not exist")
            nxt[g] = index[key]
        children.append(nxt)
    on_true, on_false = children
    referenced = set(on_true[~leaf].tolist()) | set(on_false[~leaf].tolist())
    roots, seen_trees = [], set()
    for g in range(count):
        if g not in referenced and int(tree_ids[g]) not in seen_trees:
            roots.append(g)
            seen_trees.add(int(tree_ids[g]))
    if len(seen_trees) != len(set(tree_ids.tolist())):
        raise attrs.refuse("a tree has no root (every node is some node's child)")
    roots_a = np.array(roots, np.int64)
    weights = np.zeros((count, outputs), np.float32)
    scored = np.zeros((count, outputs), bool)
    w_tree = attrs.array(f"{prefix}_treeids", np.int64)
    w_node = attrs.array(f"{prefix}_nodeids", np.int64)
    w_out = attrs.array(f"{prefix}_ids", np.int64)
    w_value = attrs.array(f"{prefix}_weights", np.float64)
    if not len(w_tree) == len(w_node) == len(w_out) == len(w_value):
        raise attrs.refuse(f"the {prefix}_* attributes differ in length")
    for t, n, k, w in zip(w_tree, w_node, w_out, w_value, strict=True):
        g = index.get((int(t), int(n)))
        if g is None or not 0 <= k < outputs:
            raise attrs.refuse(f"a weight names node {int(n)} of tree {int(t)} and output "
                               f"{int(k)}, which do not exist")
        weights[g, k] = np.float32(weights[g, k] + np.float32(w))
        scored[g, k] = True
    return Forest(feature, threshold, modes, on_true, on_false, missing, roots_a, weights,
                  scored, _tree_of(on_true, on_false, roots_a, count),
                  _walk_depths(attrs, (on_true, on_false), leaf, roots_a))


def _tree_of(on_true: np.ndarray, on_false: np.ndarray, roots: np.ndarray,
             count: int) -> np.ndarray:
    tree = np.full(count, -1, np.int64)
    for t, r in enumerate(roots):
        stack = [int(r)]
        while stack:
            g = stack.pop()
            if tree[g] >= 0:
                continue
            tree[g] = t
            stack += [int(on_true[g]), int(on_false[g])]
    return tree


def _opset5_forest(attrs: Attrs, dtype) -> Forest:
    """The tables of TreeEnsemble (ai.onnx.ml opset 5), in the input's float type: interior
    nodes and leaves numbered apart, each child named as one or the other."""
    feature = attrs.array("nodes_featureids", np.int64)
    inner = len(feature)
    splits = attrs.array("nodes_splits", dtype)
    mode_codes = attrs.array("nodes_modes", np.int64)
    if len(splits) != inner or len(mode_codes) != inner:
        raise attrs.refuse("nodes_splits and nodes_modes must give every node a value")
    if not set(mode_codes.tolist()) <= set(range(len(_MODES) + 1)):
        raise attrs.refuse(f"node modes {sorted(set(mode_codes.tolist()))} are not all known")
    leaf_targets = attrs.array("leaf_targetids", np.int64)
    leaf_weights = attrs.array("leaf_weights", dtype)
    leaves = len(leaf_targets)
    outputs = int(attrs.get("n_targets", 1))
    count = inner + leaves

    def child(ids_name: str, leaf_name: str) -> np.ndarray:
        ids = attrs.array(ids_name, np.int64)
        is_leaf = attrs.array(leaf_name, np.int64, np.zeros(inner)).astype(bool)
        return np.concatenate([np.where(is_leaf, ids + inner, ids),
                               np.arange(inner, count, dtype=np.int64)])

    on_true = child("nodes_truenodeids", "nodes_trueleafs")
    on_false = child("nodes_falsenodeids", "nodes_falseleafs")
    if on_true.max(initial=0) >= count or on_false.max(initial=0) >= count:
        raise attrs.refuse("a node points past the node and leaf tables")
    missing = np.concatenate([attrs.array("nodes_missing_value_tracks_true", np.int64,
                                          np.zeros(inner)).astype(bool), np.zeros(leaves, bool)])
    roots = attrs.array("tree_roots", np.int64)
    leaf = np.arange(count) >= inner
    modes = [(*_MODES, _MEMBER)[int(c)] for c in mode_codes] + ["LEAF"] * leaves
    weights = np.zeros((count, outputs), dtype)
    scored = np.zeros((count, outputs), bool)
    np.add.at(weights, (inner + np.arange(leaves), leaf_targets), leaf_weights)
    scored[inner + np.arange(leaves), leaf_targets] = True
    return Forest(np.concatenate([feature, np.zeros(leaves, np.int64)]),
                  np.concatenate([splits, np.zeros(leaves, dtype)]), modes, on_true,
                  on_false, missing, roots, weights, scored,
                  _tree_of(on_true, on_false, roots, count),
                  _walk_depths(attrs, (on_true, on_false), leaf, roots),
                  _member_sets(attrs, modes, dtype))


def _member_sets(attrs: Attrs, modes: list[str], dtype) -> np.ndarray | None:
    """[G, M] the set of each BRANCH_MEMBER node (its values, listed in node order and
    delimited by NaN in `membership_values`), padded with NaN (equal to nothing)."""
    at = [g for g, m in enumerate(modes) if m == _MEMBER]
    if not at:
        return None
    values = attrs.array("membership_values", dtype)
    sets, current = [], []
    for v in values:
        if np.isnan(v):
            sets.append(current)
            current = []
        else:
            current.append(v)
    if current:
        sets.append(current)
    if len(sets) != len(at):
        raise attrs.refuse(f"membership_values holds {len(sets)} sets for {len(at)} "
                           "BRANCH_MEMBER nodes")
    table = np.full((len(modes), max(1, *map(len, sets))), np.nan, dtype)
    for g, members in zip(at, sets, strict=True):
        table[g, :len(members)] = members
    return table


def _features(b: Body, attrs: Attrs, dtypes, double: bool = False) -> str:
    """X as [N, F], float32 (an integer input is converted, as onnxruntime does), or float64
    where `double` allows it."""
    x = b.inputs[0]
    if dtypes[0] == ir.DataType.DOUBLE and double:
        pass
    elif dtypes[0] == ir.DataType.DOUBLE:
        raise attrs.refuse("double inputs are not supported for this tree ensemble",
                           hint="export the model with float32 inputs")
    elif dtypes[0] != ir.DataType.FLOAT:
        x = b.op("Cast", x, to=int(ir.DataType.FLOAT))
    shape = attrs.node.inputs[0].shape
    if shape is None or shape.rank() not in (1, 2):
        raise attrs.refuse("tree ensembles take a [N, F] or [F] input")
    return b.op("Unsqueeze", x, b.ints(0)) if shape.rank() == 1 else x


def _leaves(b: Body, forest: Forest, x: str) -> str:
    """The leaf each (row, tree) pair reaches: [N, T] global node indices, the trees in
    order of decreasing depth. Only the trees deeper than a level take part in it (a
    LightGBM forest's depths vary several-fold), the others' leaves are set aside."""
    order = np.argsort(-forest.depths, kind="stable")
    depths = forest.depths[order]
    trees = len(order)
    rows = b.op("Shape", x, start=0, end=1)
    # node indices as int32 (half the bytes the walk moves per level) where they fit
    index = np.int32 if len(forest.modes) < 2**31 else np.int64
    node = b.op("Expand", b.const(forest.roots[order].reshape(1, trees).astype(index)),
                b.op("Concat", rows, b.ints(trees), axis=0))
    reached: list[str] = []  # the leaves of the trees already walked to their end
    feature, threshold = b.const(forest.feature.astype(index)), b.const(forest.threshold)
    on_true = b.const(forest.on_true.astype(index))
    on_false = b.const(forest.on_false.astype(index))
    inner_modes = sorted({m for m in forest.modes if m != "LEAF"})
    mode_code = b.const(np.array([inner_modes.index(m) if m != "LEAF" else 0
                                  for m in forest.modes], np.int64)) \
        if len(inner_modes) > 1 else None
    missing = b.const(forest.missing_true) if forest.missing_true.any() else None
    members = b.const(forest.members) if forest.members is not None else None
    active = trees
    for level in range(int(depths.max(initial=0))):
        deeper = int((depths > level).sum())
        if deeper < active:
            reached.append(b.op("Slice", node, b.ints(deeper), b.ints(active), b.ints(1)))
            node = b.op("Slice", node, b.ints(0), b.ints(deeper), b.ints(1))
            active = deeper
        value = b.op("GatherElements", x, b.op("Gather", feature, node), axis=1)
        limit = b.op("Gather", threshold, node)
        tests = []
        for m in inner_modes:
            if m == _MEMBER:
                hits = b.op("Equal", b.op("Unsqueeze", value, b.ints(-1)),
                            b.op("Gather", members, node))
                test = b.op("Cast", b.op("ReduceMax", b.op("Cast", hits, to=6), b.ints(-1),
                                         keepdims=0), to=9)
            elif m == "BRANCH_NEQ":
                test = b.op("Not", b.op("Equal", value, limit))
            else:
                test = b.op(_COMPARE[m], value, limit)
            tests.append(test)
        holds = tests[0]
        if mode_code is not None:
            code = b.op("Gather", mode_code, node)
            for i, test in enumerate(tests[1:], 1):
                holds = b.op("Where", b.op("Equal", code, b.const(np.int64(i))), test, holds)
        if missing is not None:
            holds = b.op("Or", holds, b.op("And", b.op("IsNaN", value),
                                          b.op("Gather", missing, node)))
        node = b.op("Where", holds, b.op("Gather", on_true, node),
                    b.op("Gather", on_false, node))
    if not reached:
        return node
    return b.op("Concat", node, *reversed(reached), axis=1)


def _static_scored(attrs: Attrs, forest: Forest) -> np.ndarray:
    """[K] whether each output gets a score in every row (True) or in none (False); refused
    where it depends on the leaf a row reaches."""
    outputs = forest.weights.shape[1]
    scored = np.zeros(outputs, bool)
    leaf = forest.leaf
    for t in range(len(forest.roots)):
        in_tree = forest.scored[(forest.tree == t) & leaf]
        if not len(in_tree):
            continue
        every, some = in_tree.all(axis=0), in_tree.any(axis=0)
        if (some & ~every).any():
            raise attrs.refuse("some leaves of a tree score an output that others do not; "
                               "such forests are not supported")
        scored |= every
    return scored


def _aggregate(b: Body, attrs: Attrs, forest: Forest, leaves: str, how: str) -> str:
    picked = b.op("Gather", b.const(forest.weights), leaves)  # [N, T, K]
    trees = b.ints(1)
    if how == "SUM":
        return b.op("ReduceSum", picked, trees, keepdims=0)
    if how == "AVERAGE":
        total = b.op("ReduceSum", picked, trees, keepdims=0)
        return b.op("Div", total, b.const(forest.weights.dtype.type(len(forest.roots))))
    leaf = forest.leaf
    reached = forest.scored[leaf & (forest.tree >= 0)]
    if not reached.all():
        raise attrs.refuse(f"aggregate_function {how} over leaves that do not score every "
                           "output is not supported")
    return b.op("ReduceMin" if how == "MIN" else "ReduceMax", picked, trees, keepdims=0)


def tree_ensemble_regressor(b: Body, attrs: Attrs, dtypes) -> list[str]:
    outputs = int(attrs.get("n_targets", 1))
    forest = _legacy_forest(attrs, "target", outputs)
    how = attrs.get("aggregate_function", "SUM")
    if how not in _AGGREGATES:
        raise attrs.refuse(f"aggregate_function {how} is not supported")
    return [_regression(b, attrs, forest, _features(b, attrs, dtypes), how,
                        attrs.array("base_values", np.float32), transform_name(attrs))]


def _regression(b: Body, attrs: Attrs, forest: Forest, x: str, how: str, base: np.ndarray,
                transform: str) -> str:
    outputs = forest.weights.shape[1]
    scores = _aggregate(b, attrs, forest, _leaves(b, forest, x), how)
    if len(base) == outputs:  # (one base value for several targets is ignored, as onnxruntime)
        scores = b.op("Add", scores, b.const(base))
    return apply_transform(b, transform, scores) if outputs > 1 else scores


def tree_ensemble(b: Body, attrs: Attrs, dtypes) -> list[str]:
    """ai.onnx.ml opset 5's single tree operator (a regressor with integer enums)."""
    double = dtypes[0] == ir.DataType.DOUBLE
    forest = _opset5_forest(attrs, np.float64 if double else np.float32)
    code = int(attrs.get("aggregate_function", 1))
    if not 0 <= code < len(_AGGREGATES):
        raise attrs.refuse(f"aggregate_function {code} is not supported")
    transform = transform_name(attrs)
    if double and transform == "SOFTMAX_ZERO":
        raise attrs.refuse("SOFTMAX_ZERO over double scores is not supported")
    return [_regression(b, attrs, forest, _features(b, attrs, dtypes, double),
                        _AGGREGATES[code], np.zeros(0), transform)]


def tree_ensemble_classifier(b: Body, attrs: Attrs, dtypes) -> list[str]:
    attrs.no_strings("classlabels_strings")
    labels = attrs.array("classlabels_int64s", np.int64)
    classes = len(labels)
    if classes < 2:
        raise attrs.refuse("TreeEnsembleClassifier needs two or more integer class labels")
    forest = _legacy_forest(attrs, "class", classes)
    transform = transform_name(attrs)
    base = attrs.array("base_values", np.float32)
    scored = _static_scored(attrs, forest)
    x = _features(b, attrs, dtypes)
    sums = _aggregate(b, attrs, forest, _leaves(b, forest, x), "SUM")  # [N, K]
    if classes > 2:
        if len(base):
            sums = b.op("Add", sums, b.const(np.pad(base[:classes], (0, classes - len(base)))))
            scored[:len(base)] = True
        masked = b.op("Where", b.const(scored), sums, b.const(np.float32(-np.inf)))
        best = b.op("ArgMax", masked, axis=1, keepdims=0)
        return [b.op("Gather", b.const(labels), best), apply_transform(b, transform, sums)]
    return _binary(b, attrs, forest, labels, sums, scored, base, transform)


def _column(b: Body, scores: str, k: int) -> str:
    return b.op("Gather", scores, b.ints(k), axis=1)  # [N, 1]


def _binary(b: Body, attrs: Attrs, forest: Forest, labels: np.ndarray, sums: str,
            scored: np.ndarray, base: np.ndarray, transform: str) -> list[str]:
    """Two classes, as onnxruntime's classifier aggregator finalises them."""
    ids = {int(k) for k in np.nonzero(forest.scored.any(axis=0))[0]}
    binary_case = len(ids) == 1
    all_positive = bool((forest.weights[forest.scored] >= 0).all())
    s0, s1 = _column(b, sums, 0), _column(b, sums, 1)
    second = -1  # onnxruntime's write_additional_scores: how one score becomes two
    if len(base) == 2:
        if scored[1]:
            p1 = b.op("Add", s0, b.const(np.float32(base[1])))
            pair = [b.op("Neg", p1), p1]
        else:
            pair = [b.op("Add", s0, b.const(np.float32(base[0]))),
                    b.op("Add", s1, b.const(np.float32(base[1])))]
        has = [scored[0], True] if scored[1] else [scored[0], scored[1]]
    elif len(base) == 1:
        p0 = b.op("Add", s0, b.const(np.float32(base[0])))
        pair = [p0, s1] if scored[1] else [p0]
        has = [scored[0], scored[1]]
    else:
        if not len(base):
            second = 3
        pair = [s0, s1] if scored[1] or len(base) else [s0]
        has = [scored[0], scored[1]]
    if len(pair) == 2 and has[1]:
        positive_weight = pair[1]
    else:
        positive_weight = pair[0] if has[0] else b.const(np.zeros((1, 1), np.float32))
    # a class without a score is written as 0, whatever was added to it
    zero = b.const(np.zeros((1, 1), np.float32))
    pair = [p if h else b.op("Mul", p, zero) for p, h in zip(pair, has, strict=False)]
    cut = 0.5 if binary_case and all_positive else 0.0
    positive = b.op("Squeeze", b.op("Greater", positive_weight, b.const(np.float32(cut))),
                    b.ints(1))
    if binary_case:
        second = 0 if all_positive else 2
        chosen = (labels[1], labels[0])
    else:
        chosen = (1, 0)
    label = b.op("Where", positive, b.const(np.int64(chosen[0])), b.const(np.int64(chosen[1])))
    if len(pair) == 2:
        return [label, apply_transform(b, transform, b.op("Concat", *pair, axis=1))]
    if second < 0:
        raise attrs.refuse("a two-class forest with this form of base_values is not supported")
    return [label, two_scores(b, pair[0], second >= 2, transform)]
