"""ONNX backend node test cases for unit tests: those of one operator, and a case's model with
some graph inputs frozen into initializers of the case's values (parameters such as TopK's k
or Col2Im's shapes, which aotc needs as constants because they set output shapes)."""

from __future__ import annotations

import warnings

import numpy as np
import onnx
from onnx import numpy_helper


def backend_cases(prefix: str) -> list:
    """The cases whose name starts with `prefix`."""
    from onnx.backend.test.case.node import collect_testcases

    with warnings.catch_warnings():  # the generators of other operators' cases warn
        warnings.simplefilter("ignore")
        return [c for c in collect_testcases() if c.name.startswith(prefix)]


def frozen(case, positions: list[int]) -> tuple[onnx.ModelProto, list[np.ndarray],
                                                 list[np.ndarray]]:
    """The case's model with node inputs at `positions` made initializers of the case's
    values, the remaining feeds, and the expected outputs."""
    inputs, outputs = case.data_sets[0]
    inputs = [numpy_helper.to_array(a) if isinstance(a, onnx.TensorProto) else np.asarray(a)
              for a in inputs]
    model = onnx.ModelProto.FromString(case.model.SerializeToString())
    graph = model.graph
    names = [graph.node[0].input[p] for p in positions]
    graph_inputs = [i.name for i in graph.input]
    for name in names:
        graph.initializer.append(numpy_helper.from_array(inputs[graph_inputs.index(name)], name))
    keep = [k for k, n in enumerate(graph_inputs) if n not in names]
    for k in reversed(range(len(graph_inputs))):
        if k not in keep:
            del graph.input[k]
    return model, [inputs[k] for k in keep], [np.asarray(o) for o in outputs]
