"""The Layer lifecycle (config in `__init__`, weights in `build`, math in `call`),
input checks, symbolic inputs, and layer (de)serialization.

>>> import tapeflow as tp
>>> class Scale(tp.layers.Layer):
...     def build(self, input_shape):
...         self.w = self.add_weight("w", (input_shape[-1],), initializer="ones")
...     def call(self, inputs):
...         return inputs * self.w
>>> layer = Scale(name="scale")
>>> layer(tp.ones((2, 3))).shape, [w.name for w in layer.weights]
((2, 3), ['scale/w'])
"""

from __future__ import annotations

import contextlib
import copy
import functools
import inspect
import math
import re
import threading
from collections import defaultdict

import numpy as np

from tapeflow import constraints, dtypes, initializers, mixed_precision, regularizers, serialization, tree
from tapeflow.graph.ir import GraphIR
from tapeflow.graph.trace import TensorSpec, Tracer
from tapeflow.layers.symbolic import SymbolicTensor, symbolic_leaves
from tapeflow.metrics.metric import Metric
from tapeflow.ops.creation import full_like
from tapeflow.ops.creation import tensor as as_tensor
from tapeflow.ops.math import cast
from tapeflow.ops.reduce import sum as reduce_sum
from tapeflow.ops.registry import autocast_scope
from tapeflow.ops.shapes import as_dims
from tapeflow.tensor import Tensor, TracedTensor, Variable, eager_scope

_REGISTRY: dict[str, type] = {}  # class name -> tapeflow's own Layer subclasses, for deserialize()
_NAME_COUNTS: defaultdict = defaultdict(int)
_ADDED_LOSSES = [False]  # whether any layer's add_loss ran yet: until then no call has losses to clear


def snake_case(name: str) -> str:
    """A class name in Keras' default layer-name form.

    >>> snake_case("Conv2DTranspose"), snake_case("SimpleRNN")
    ('conv2d_transpose', 'simple_rnn')
    """
    name = re.sub(r"(.)([A-Z][a-z]+)", r"\1_\2", name)
    return re.sub(r"([a-z])([A-Z])", r"\1_\2", name).lower()


def unique_name(prefix: str) -> str:
    """`prefix` the first time, then prefix_1, prefix_2, ... (as Keras names layers).

    >>> unique_name("doc_probe"), unique_name("doc_probe")
    ('doc_probe', 'doc_probe_1')
    """
    count = _NAME_COUNTS[prefix]
    _NAME_COUNTS[prefix] += 1
    return prefix if count == 0 else f"{prefix}_{count}"


# ------------------------------------------------------------ symbolic inputs
def Input(
    shape=None, batch_size: int | None = None, dtype="float32", name: str | None = None, batch_shape=None
) -> SymbolicTensor:
    """A symbolic model input: `shape` excludes the batch dimension (or give the whole
    `batch_shape`). The output of an `InputLayer`, as in Keras; also `tp.Input`.

    Args:
        shape: the shape of one example, a tuple of ints (None for a size known only later).
        batch_size: a fixed batch size, or None (the default) for any.
        dtype: the dtype of the values fed (floating or integer, e.g. "int64" ids for Embedding).
        name: the input's name (by default "input_layer", "input_layer_1", ...).
        batch_shape: the full shape including the batch axis, instead of shape and batch_size.

    >>> import tapeflow as tp
    >>> tp.layers.Input(shape=(28, 28, 1), dtype="float64").shape
    (None, 28, 28, 1)
    """
    return InputLayer(shape, batch_size, dtype, batch_shape, name).output


def _as_shape(shape) -> tuple:
    return as_dims("Input", shape, unknown=True)


def _as_shapes(shape):
    """One shape as a tuple, or several (a list or tuple of shapes) as a list of tuples."""
    if isinstance(shape, list | tuple) and shape and isinstance(shape[0], list | tuple):
        return [_as_shape(s) for s in shape]
    return _as_shape(shape)


def _map_inputs(fn, inputs):
    """`fn` on one input, or on each of a list, tuple (giving a list) or dict of inputs; an
    input that is itself a nested Python list is one array."""
    if isinstance(inputs, tuple):
        inputs = list(inputs)
    return tree.map_structure(fn, inputs, is_leaf=lambda item: item is not inputs)


def _shape_of(inputs):
    return _map_inputs(lambda t: tuple(t.shape), inputs)


# -------------------------------------------------------------- input checks
class InputSpec:
    """What a layer accepts: an exact rank, bounds on the rank, and fixed axis sizes.

    >>> spec = InputSpec(min_ndim=2, axes={-1: 4})
    >>> spec.check("dense", (3,))
    Traceback (most recent call last):
    ...
    ValueError: dense: expected input of rank >= 2, got shape (3,)
    """

    def __init__(self, ndim: int | None = None, min_ndim: int | None = None, max_ndim: int | None = None, axes=None):
        self.ndim = ndim
        self.min_ndim = min_ndim
        self.max_ndim = max_ndim
        self.axes = dict(axes or {})

    def check(self, layer_name: str, shape: tuple) -> None:
        rank = len(shape)
        if self.ndim is not None and rank != self.ndim:
            raise ValueError(f"{layer_name}: expected input of rank {self.ndim}, got shape {shape}")
        if self.min_ndim is not None and rank < self.min_ndim:
            raise ValueError(f"{layer_name}: expected input of rank >= {self.min_ndim}, got shape {shape}")
        if self.max_ndim is not None and rank > self.max_ndim:
            raise ValueError(f"{layer_name}: expected input of rank <= {self.max_ndim}, got shape {shape}")
        for axis, size in self.axes.items():
            if -rank <= axis < rank and shape[axis] is not None and shape[axis] != size:
                raise ValueError(
                    f"{layer_name}: expected axis {axis} of input to have size {size} "
                    f"(the size the layer was built for), got shape {shape}"
                )

    def __repr__(self) -> str:
        return f"InputSpec(ndim={self.ndim}, min_ndim={self.min_ndim}, max_ndim={self.max_ndim}, axes={self.axes})"


# ------------------------------------------------------------- call context
class _CallContext(threading.local):
    """The `training` flag of the outermost layer call, inherited by nested calls, the layers
    whose calls are running (outermost first), and the tracer of the `compute_output_shape`
    probe running in this thread, if any."""

    def __init__(self):
        self.training: list = []
        self.calling: list = []
        self.probe: Tracer | None = None


_CONTEXT = _CallContext()


@functools.cache
def _call_parameters(cls) -> frozenset:
    return frozenset(inspect.signature(cls.call).parameters)


@functools.cache
def call_argument_names(cls) -> tuple:
    """The names of `cls.call`'s arguments after self, in order (for positional arguments
    given by keyword, and for the masks of named arguments)."""
    params = list(inspect.signature(cls.call).parameters.values())[1:]
    return tuple(p.name for p in params if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY))


def _mask_of(structure):
    """The masks carried by the symbolic tensors of `structure` (same nesting), or None
    when none carries one."""
    masks = tree.map_structure(lambda leaf: getattr(leaf, "_keras_mask", None), structure)
    return masks if any(m is not None for m in tree.flatten(masks)) else None


def _attach_masks(outputs, masks) -> None:
    """Record on each symbolic output the (symbolic) mask `compute_mask` gave it."""
    if masks is None:
        return
    flat, flat_masks = tree.flatten(outputs), tree.flatten(masks)
    if isinstance(outputs, SymbolicTensor):
        flat_masks = [masks] if isinstance(masks, SymbolicTensor) else flat_masks[:1]
    for out, mask in zip(flat, flat_masks, strict=False):
        if isinstance(out, SymbolicTensor) and isinstance(mask, SymbolicTensor):
            out._keras_mask = mask


def _one_eager_tensor(inputs, args: tuple, kwargs: dict) -> bool:
    """Whether a call's only tensor is `inputs`, an eager tensor, its other arguments flags
    (as `training=`): such a call has no symbolic argument and nothing nested to map over."""
    if args or not isinstance(inputs, Tensor) or isinstance(inputs, TracedTensor):
        return False
    for value in kwargs.values():
        if value is not None and type(value) is not bool:
            return False
    return True


def _has_shape_rule(cls) -> bool:
    """Whether `cls` overrides compute_output_shape instead of deriving it from `call`."""
    return cls.compute_output_shape is not Layer.compute_output_shape


# -------------------------------------------------------------------- Layer
class Layer:
    """Base class of all layers.

    Subclasses take their configuration in `__init__`, create weights in
    `build(input_shape)` with `add_weight`, and compute in `call(inputs, training=None,
    mask=None)`. The first `__call__` builds the layer from the input's shape.
    Layers held in attributes (or in lists, tuples and dicts of them) are tracked:
    their weights appear in `weights`, `get_weights()` and `count_params()`.

    Args:
        name: the layer's name, the prefix of its weights' names (by default the class name
            in snake case, numbered: "dense", "dense_1", ...).
        trainable: whether its weights are trained.
        dtype: the dtype of its weights and computations (floating; floating inputs are cast to it).
        input_shape: the shape of one input example without the batch axis; on the first layer
            of a `tp.Sequential`, declares the model's input (Keras' form of `tp.Input`).
        activity_regularizer: a regularizer of the outputs (a name, object or function for
            `tp.regularizers.get`): after each call, its value on each output, divided by the
            batch size, joins `losses`.
        **kwargs: none other is accepted (a TypeError names them).

    >>> import tapeflow as tp
    >>> dense = tp.layers.Dense(3, name="head")
    >>> dense(tp.ones((2, 4))).shape, dense.count_params()
    ((2, 3), 15)
    >>> [w.name for w in dense.weights]
    ['head/kernel', 'head/bias']
    """

    _input_signature = None  # TensorSpecs (batch None) of the first call's inputs, for freezing

    def __init_subclass__(cls, **kwargs):
        super().__init_subclass__(**kwargs)
        if cls.__module__.startswith("tapeflow.") and not cls.__name__.startswith("_"):
            _REGISTRY[cls.__name__] = cls  # user classes are found through register_serializable
        if "build" in cls.__dict__:  # every build, however it is reached, marks the layer built
            cls.build = _marks_built(cls.__dict__["build"])

    def __new__(cls, *args, **kwargs):
        layer = super().__new__(cls)
        layer._init_arguments = (args, kwargs)  # for the default get_config of a subclass
        return layer

    def __init__(
        self,
        name: str | None = None,
        trainable: bool = True,
        dtype=None,
        input_shape=None,
        activity_regularizer=None,
        **kwargs,
    ):
        if kwargs:
            raise TypeError(f"{type(self).__name__}: unexpected keyword arguments {sorted(kwargs)}")
        # Keras' `input_shape=` on the first layer of a Sequential: the model's input, without the batch axis.
        self._input_shape_arg = None if input_shape is None else _as_shape(input_shape)
        self.name = name or unique_name(snake_case(type(self).__name__))
        if dtype is None:
            self.dtype_policy = mixed_precision.global_policy()
        elif isinstance(dtype, mixed_precision.Policy) or dtype in ("mixed_float16", "mixed_bfloat16"):
            self.dtype_policy = mixed_precision.Policy(dtype)
        else:
            as_dtype = dtypes.as_dtype(dtype)
            if as_dtype.kind != "f":
                raise TypeError(f"{self.name}: the layer dtype must be floating point, got {as_dtype}")
            self.dtype_policy = mixed_precision.Policy(as_dtype.name)
        self.dtype = self.dtype_policy.variable_dtype  # of the weights
        self.compute_dtype = self.dtype_policy.compute_dtype  # of inputs and outputs
        self._trainable = bool(trainable)
        self.built = False
        self.input_spec: InputSpec | list | None = None
        self._trainable_variables: list[Variable] = []
        self._non_trainable_variables: list[Variable] = []
        self._regularized: list[tuple[Variable, object]] = []
        # a penalty on each output, per example, that joins `losses` after every call (Keras's)
        self.activity_regularizer = regularizers.get(activity_regularizer)

    # ----- lifecycle -----
    def build(self, input_shape) -> None:
        """Create the weights for inputs of `input_shape` (the batch size may be None)."""

    def call(self, inputs, *args, **kwargs):
        raise NotImplementedError(f"{type(self).__name__} must implement call()")

    def compute_output_shape(self, input_shape):
        """The output shape for `input_shape` (None dims allowed), without computing or building.

        `call` runs at inference on traced inputs of a throwaway graph, so that each op's
        shape rule gives the shapes. A copy of the layer runs it, sharing the weights that
        exist and building the missing ones as zeros: the layer stays as it was and no random
        numbers are drawn. Nested layers that override this method answer with their
        override. A layer with several outputs returns a list of shapes.

        >>> import tapeflow as tp
        >>> dense = tp.layers.Dense(3)
        >>> dense.compute_output_shape((None, 7)), dense.built
        ((None, 3), False)
        """
        input_shape = _as_shapes(input_shape)
        probe = _probe_copy(self, {})
        tracer = Tracer(GraphIR(f"{self.name}_output_shape"))
        inputs = _map_shapes(lambda shape: tracer.add_input("input", shape, self.compute_dtype), input_shape)
        outer, _CONTEXT.probe = _CONTEXT.probe, tracer
        try:
            with tracer:
                probe._maybe_build(input_shape)
                outputs = probe._call_in_context(inputs, (), {"training": False})
        finally:
            _CONTEXT.probe = outer
        return _shape_of(outputs)

    @property
    def supports_masking(self) -> bool:
        """Whether the layer gives its outputs a mask (from `compute_mask`): by default, as
        in Keras, when it overrides `compute_mask`; a layer may set it either way."""
        explicit = vars(self).get("_supports_masking")
        return type(self).compute_mask is not Layer.compute_mask if explicit is None else explicit

    @supports_masking.setter
    def supports_masking(self, value: bool) -> None:
        self._supports_masking = bool(value)

    def compute_mask(self, inputs, mask=None):
        """The mask of the output: passed through by layers that support masking.

        Inside a functional model, a layer whose `call` takes `mask` receives the mask of its
        first argument (and `<name>_mask` arguments the masks of the arguments they name),
        and layers that support masking pass on what this method returns.
        """
        return mask if self.supports_masking else None

    def __call__(self, *args, **kwargs):
        if not args:  # the first argument by keyword: call(inputs=x) or call(query=q, ...)
            names = call_argument_names(type(self))
            if not names or names[0] not in kwargs:
                raise TypeError(f"{self.name}: called without inputs (expected a first argument {names[:1]})")
            args = (kwargs.pop(names[0]),)
        inputs, args = args[0], args[1:]
        if _one_eager_tensor(inputs, args, kwargs):  # the common call, on one tensor: nothing to map over
            inputs = self._convert_input(inputs)
            shape = inputs.shape
        else:
            if symbolic_leaves((inputs, args, kwargs)):
                return self._remember_first_call(self._call_symbolic(inputs, *args, **kwargs))
            inputs = _map_inputs(self._convert_input, inputs)
            shape = None
        if _CONTEXT.probe is not None and _has_shape_rule(type(self)):
            return self._call_shape_rule(inputs)
        if self._input_signature is None:
            flat = inputs if isinstance(inputs, list | tuple) else [inputs]
            if all(isinstance(t, Tensor) and t.ndim for t in flat):
                self._input_signature = [TensorSpec((None, *t.shape[1:]), t.dtype) for t in flat]
        self._maybe_build(_shape_of(inputs) if shape is None else shape)
        outputs = self._call_in_context(inputs, args, kwargs)
        if self.activity_regularizer is not None and _CONTEXT.probe is None:
            for output in tree.flatten(outputs):
                if isinstance(output, Tensor):
                    penalty = self.activity_regularizer(output)
                    if output.ndim:  # per example, as Keras normalizes it
                        penalty = penalty / _batch_size(output, penalty.dtype)
                    self.add_loss(penalty)
        return outputs

    def _call_in_context(self, inputs, args, kwargs):
        """`call`, given `training` (by default the enclosing call's, which nested calls
        inherit) only if it takes it, and `mask` only if it takes it."""
        params = _call_parameters(type(self))
        stack, calling = _CONTEXT.training, _CONTEXT.calling
        training = kwargs.pop("training", None)
        if training is None:
            training = stack[-1] if stack else False
        training = bool(training)
        if "training" in params:
            kwargs["training"] = training
        if "mask" not in params:
            kwargs.pop("mask", None)
        if not stack:  # the outermost call: add_loss starts over
            self._clear_losses()
        stack.append(training)
        calling.append(self)
        try:
            if self.compute_dtype is not self.dtype:  # mixed precision: weights are read in the compute dtype
                with autocast_scope(self.compute_dtype):
                    return self.call(inputs, *args, **kwargs)
            return self.call(inputs, *args, **kwargs)
        except (ValueError, TypeError) as err:
            raise self._named(err) from err
        finally:
            stack.pop()
            calling.pop()

    def _deferred_error(self, make_error):
        """A function of a bad value giving `make_error(value)` named by the layers calling now,
        as a raise inside this call would be: for an error found on a device and raised later
        (an id out of range, read at the step's end)."""
        callers = list(_CONTEXT.calling)

        def error(value):
            err = make_error(value)
            for layer in reversed(callers):
                err = layer._named(err)
            return err

        return error

    def _named(self, err: Exception) -> Exception:
        """`err` (a ValueError or TypeError from `call`) with this layer named in its message,
        as Keras names the layer whose call failed; other exception types pass unchanged."""
        message = str(err)
        if type(err) not in (ValueError, TypeError) or self.name in message:
            return err
        return type(err)(f"{self.name} ({type(self).__name__}): {message}")

    def _convert_input(self, value):
        """Arrays become tensors; floating inputs take the layer's compute dtype (as Keras autocasts)."""
        if not isinstance(value, Tensor):
            value = as_tensor(value)
        if value.dtype.kind == "f" and value.dtype is not self.compute_dtype:
            value = cast(value, self.compute_dtype)
        return value

    def _maybe_build(self, input_shape) -> None:
        self._check_input(input_shape)
        if not self.built:
            self.build(input_shape)
            self._check_input(input_shape)

    def _check_input(self, input_shape) -> None:
        spec = self.input_spec
        if spec is None:
            return
        if isinstance(input_shape, list):
            specs = spec if isinstance(spec, list) else [spec] * len(input_shape)
            for s, shape in zip(specs, input_shape, strict=False):
                s.check(self.name, shape)
        else:
            if isinstance(spec, list):
                raise ValueError(f"{self.name}: expected a list of {len(spec)} inputs, got one of shape {input_shape}")
            spec.check(self.name, input_shape)

    def _call_symbolic(self, inputs, *args, **kwargs):
        """A layer call on symbolic tensors (in any argument, at any depth): build the layer
        for its first argument, and return symbolic outputs whose history records the call,
        every argument included, for a functional model to replay."""
        shape = _shape_of(inputs)
        self._maybe_build(shape)
        masks = self._symbolic_masks(inputs, args, kwargs)
        if _has_shape_rule(type(self)):
            out = _map_shapes(lambda s: _OutputSpec(s, self.compute_dtype), self.compute_output_shape(shape))
        else:
            out = self._probe_outputs(inputs, args, {**kwargs, **masks})
        history = (self, (inputs, *args), kwargs)
        if isinstance(out, _OutputSpec):
            result = SymbolicTensor(out.shape, out.dtype, f"{self.name}/output", history)
        else:
            specs = tree.flatten(out)
            symbols = [
                SymbolicTensor(o.shape, o.dtype, f"{self.name}/output_{i}", history, i) for i, o in enumerate(specs)
            ]
            result = tree.pack_sequence_as(out, symbols)
        if self.supports_masking:
            given = kwargs.get("mask") if kwargs.get("mask") is not None else masks.get("mask", _mask_of(inputs))
            _attach_masks(result, self.compute_mask(inputs, given))
        return result

    def _symbolic_masks(self, inputs, args, kwargs) -> dict:
        """The masks a call on symbolic tensors passes on, as a functional model's run does:
        `mask` from the first argument and `<name>_mask` from the argument `name`, for the
        ones `call` takes and the caller did not give."""
        names = call_argument_names(type(self))
        found = {}
        previous = _mask_of(inputs)
        if "mask" in names and kwargs.get("mask") is None and previous is not None:
            found["mask"] = previous
        for name, arg in {**dict(zip(names[1:], args, strict=False)), **kwargs}.items():
            key = f"{name}_mask"
            if key in names and kwargs.get(key) is None and _mask_of(arg) is not None:
                found[key] = _mask_of(arg)
        return found

    def _probe_outputs(self, inputs, args, kwargs):
        """(shape, dtype) of each output of `call` on these arguments, each symbolic tensor in
        them standing in as a traced input of a throwaway graph (see `compute_output_shape`)."""
        probe = _probe_copy(self, {})
        tracer = Tracer(GraphIR(f"{self.name}_output_shape"))

        def stand_in(first):
            def traced(leaf):
                if not isinstance(leaf, SymbolicTensor):
                    return leaf
                dtype = self.compute_dtype if first and leaf.dtype.kind == "f" else leaf.dtype
                return tracer.add_input("input", leaf.shape, dtype)

            return traced

        traced_inputs = _map_inputs(stand_in(True), inputs)
        traced_args = tree.map_structure(stand_in(False), args)
        traced_kwargs = tree.map_structure(stand_in(False), kwargs)
        outer, _CONTEXT.probe = _CONTEXT.probe, tracer
        try:
            with tracer:
                outputs = probe._call_in_context(traced_inputs, traced_args, {"training": False, **traced_kwargs})
        finally:
            _CONTEXT.probe = outer
        if isinstance(outputs, tuple):
            outputs = list(outputs)
        return tree.map_structure(lambda t: _OutputSpec(t.shape, t.dtype), outputs)

    def _call_shape_rule(self, inputs):
        """Inside a shape probe, outputs from this layer's own compute_output_shape: new
        graph inputs of those shapes stand in for them."""
        shape = _shape_of(inputs)
        self._maybe_build(shape)
        out = self.compute_output_shape(shape)
        return _map_shapes(lambda s: _CONTEXT.probe.add_input(f"{self.name}/output", s, self.compute_dtype), out)

    # ----- weights -----
    def add_weight(
        self,
        *args,
        shape=None,
        initializer=None,
        dtype=None,
        trainable: bool = True,
        autocast: bool = True,
        regularizer=None,
        constraint=None,
        aggregation="none",
        overwrite_with_gradient: bool = False,
        name: str | None = None,
    ) -> Variable:
        """A new Variable named '<layer name>/<name>', tracked by this layer (Keras 3's arguments).

        Args:
            shape: a fully known shape (default `()`, a scalar).
            initializer: a name or object for `tp.initializers.get`; by default
                "glorot_uniform" for floating weights and "zeros" for others.
            dtype: by default the layer's variable dtype.
            trainable: whether training updates it.
            autocast: read in the compute dtype under mixed precision (False is refused there).
            regularizer: a name, object or function for `tp.regularizers.get`; its loss joins
                `losses`.
            constraint: a name, object or function for `tp.constraints.get`, applied to the
                weight after each optimizer update.
            aggregation: Keras's replica aggregation annotation: "none" (or None) only.
            overwrite_with_gradient: not supported (False only).
            name: without one, "variable", "variable_1", ... within the layer.

        Positional arguments are Keras 3's `(shape, initializer, dtype)`, or tapeflow's
        `(name, shape, initializer, regularizer, trainable, dtype)` when the first is a string.

        >>> import tapeflow as tp
        >>> layer = tp.layers.Layer(name="probe")
        >>> [layer.add_weight(shape=(2,)).name, layer.add_weight("scale", (3,), "ones").name]
        ['probe/variable', 'probe/scale']
        """
        named = dict(
            shape=shape, initializer=initializer, dtype=dtype, trainable=trainable, regularizer=regularizer, name=name
        )
        if args:
            order = ("name", "shape", "initializer", "regularizer", "trainable", "dtype")
            if not isinstance(args[0], str):
                order = ("shape", "initializer", "dtype")
            if len(args) > len(order):
                raise TypeError(f"{self.name}.add_weight: at most {len(order)} positional arguments, got {len(args)}")
            defaults = {"trainable": True}
            for key, value in zip(order, args, strict=False):
                if named[key] is not defaults.get(key):
                    raise TypeError(f"{self.name}.add_weight: {key} given both by position and by keyword")
                named[key] = value
        shape, initializer, dtype, trainable, regularizer, name = named.values()
        constraint = constraints.get(constraint)
        if overwrite_with_gradient:
            raise ValueError(f"{self.name}.add_weight: overwrite_with_gradient=True is not supported")
        if aggregation not in (None, "none"):
            raise ValueError(f"{self.name}.add_weight: aggregation={aggregation!r} is not supported; pass 'none'")
        dtype = dtypes.as_dtype(dtype or self.dtype)
        if not autocast and dtype.kind == "f" and self.compute_dtype is not self.dtype:
            raise ValueError(
                f"{self.name}.add_weight: autocast=False is not supported under the mixed precision policy "
                f"{self.dtype_policy.name!r}"
            )
        if name is None:
            count = vars(self).get("_unnamed_weights", 0)
            self._unnamed_weights = count + 1
            name = "variable" if count == 0 else f"variable_{count}"
        if not isinstance(name, str) or not name or "/" in name:
            raise ValueError(f"{self.name}.add_weight: name must be a non-empty string without '/', got {name!r}")
        shape = _as_shape(() if shape is None else shape)
        if any(d is None or d < 0 for d in shape):
            raise ValueError(f"{self.name}: weight '{name}' needs a fully known shape, got {shape}")
        budget = _WEIGHT_BUDGET.state
        if budget is not None:
            size = math.prod(shape)
            if size > budget["left"]:
                raise ValueError(
                    f"the config makes layer '{self.name}' ({type(self).__name__}) create a weight of {size} "
                    f"values, more than {budget['source']}"
                )
            budget["left"] -= size
        if initializer is None:
            initializer = "glorot_uniform" if dtype.kind == "f" else "zeros"
        initializer = initializers.get(initializer)
        with eager_scope():  # weights are created eagerly, also on a first call inside a freeze
            value = np.zeros(shape, dtype.np) if _CONTEXT.probe is not None else initializer(shape, dtype.name)
            var = Variable(
                value,
                trainable=trainable and self._trainable,
                name=f"{self.name}/{name}",
                dtype=dtype,
                constraint=constraint,
            )
        if tuple(var.shape) != shape:
            raise ValueError(f"{self.name}: initializer for '{name}' returned shape {var.shape}, expected {shape}")
        (self._trainable_variables if trainable else self._non_trainable_variables).append(var)
        if regularizer is not None:
            self._regularized.append((var, regularizers.get(regularizer)))
        return var

    @property
    def trainable_variables(self) -> list[Variable]:
        """The trainable weights (Keras 3's name for `trainable_weights`)."""
        return self.trainable_weights

    @property
    def non_trainable_variables(self) -> list[Variable]:
        """The non-trainable weights, such as batch normalization's moving statistics."""
        return self.non_trainable_weights

    @property
    def input(self):
        """The symbolic input of the layer's first call on symbolic tensors (a list when it
        took several); an AttributeError if it was never called on them, as in Keras.

        >>> import tapeflow as tp
        >>> x = tp.Input((3,), name="x")
        >>> dense = tp.layers.Dense(2)
        >>> y = dense(x)
        >>> dense.input is x, dense.output is y
        (True, True)
        """
        return _single(self._first_symbolic_call("input")[0])

    @property
    def output(self):
        """The symbolic output of the layer's first call on symbolic tensors (see `input`)."""
        return _single(self._first_symbolic_call("output")[1])

    def _first_symbolic_call(self, what: str):
        call = vars(self).get("_first_call")
        if call is None:
            raise AttributeError(f"The layer {self.name} has never been called and thus has no defined {what}.")
        return call

    def _remember_first_call(self, outputs):
        """Keep the first symbolic call's inputs and outputs (for `input` and `output`)."""
        if vars(self).get("_first_call") is None:
            leaves = symbolic_leaves(outputs)
            history = leaves[0].history if leaves else None
            inputs = symbolic_leaves((history[1], history[2])) if history else []
            self._first_call = (inputs, outputs)
        return outputs

    def add_loss(self, loss) -> None:
        """Add a scalar loss (or a list of them) from `call`: it joins `losses` until the next
        outermost call, and training adds it to the loss it minimizes.

        >>> import tapeflow as tp
        >>> class Penalized(tp.layers.Layer):
        ...     def call(self, x):
        ...         self.add_loss(0.5 * tp.sum(x))
        ...         return x
        >>> layer = Penalized()
        >>> _ = layer(tp.ones((2, 2)))
        >>> [float(v) for v in layer.losses]
        [2.0]
        """
        for value in tree.flatten(loss):
            if not isinstance(value, Tensor):
                raise ValueError(
                    f"{self.name}.add_loss: a loss must be a tensor computed in call() or build(), got {value!r}"
                )
            vars(self).setdefault("_losses", []).append(value)
            _ADDED_LOSSES[0] = True

    def _clear_losses(self) -> None:
        if not _ADDED_LOSSES[0]:
            return
        for layer in self._flatten_layers():
            if vars(layer).get("_losses"):
                layer._losses = []

    def __setattr__(self, name: str, value) -> None:
        """Initializer and regularizer arguments are checked when the layer is made, as in
        Keras, so an unknown name fails at the line that gave it rather than at `build`."""
        if isinstance(value, str | dict):
            lookups = {
                "_initializer": initializers.get,
                "_regularizer": regularizers.get,
                "_constraint": constraints.get,
            }
            lookup = lookups.get(name[name.rfind("_") :])
            if lookup is not None:
                try:
                    lookup(value)
                except (ValueError, TypeError) as err:
                    raise type(err)(f"{type(self).__name__}: {name}: {err}") from None
        object.__setattr__(self, name, value)

    def _flatten_layers(self) -> list[Layer]:
        """This layer and every layer it holds, depth first, each once."""
        out, seen, stack = [], set(), [self]
        while stack:
            layer = stack.pop()
            if id(layer) in seen:
                continue
            seen.add(id(layer))
            out.append(layer)
            stack.extend(reversed(list(layers_in(vars(layer).values()))))
        return out

    @property
    def weights(self) -> list[Variable]:
        """All weights in Keras order: own trainable, own non-trainable, then each held layer's."""
        out, seen = [], set()
        for layer in self._flatten_layers():
            for v in layer._trainable_variables + layer._non_trainable_variables:
                if id(v) not in seen:
                    seen.add(id(v))
                    out.append(v)
        return out

    @property
    def trainable_weights(self) -> list[Variable]:
        return [v for v in self.weights if v.trainable]

    @property
    def non_trainable_weights(self) -> list[Variable]:
        return [v for v in self.weights if not v.trainable]

    @property
    def trainable(self) -> bool:
        return self._trainable

    @trainable.setter
    def trainable(self, value: bool) -> None:
        """Freezing a layer freezes all its weights and the layers it holds."""
        for layer in self._flatten_layers():
            layer._trainable = bool(value)
            for v in layer._trainable_variables:
                v.trainable = bool(value)

    @property
    def losses(self) -> list[Tensor]:
        """The losses `add_loss` added in the last outermost call (this layer's, then those of
        the layers it holds), then the regularization losses of the trainable weights,
        computed from their current values, as in Keras."""
        layers = self._flatten_layers()
        added = [loss for layer in layers for loss in vars(layer).get("_losses", ())]
        return added + [reg(v) for layer in layers for v, reg in layer._regularized if v.trainable]

    def count_params(self) -> int:
        if not self.built:
            raise ValueError(f"{self.name}: count_params needs a built layer; call it on an input or build() it first")
        return sum(math.prod(v.shape) for v in self.weights)

    def get_weights(self) -> list[np.ndarray]:
        """Copies of the weights' values, in `weights` order."""
        return [np.array(v.numpy()) for v in self.weights]

    def set_weights(self, values) -> None:
        """Assign values in `weights` order; the count and every shape must match."""
        weights = self.weights
        values = list(values)
        if len(values) != len(weights):
            raise ValueError(
                f"{self.name}: set_weights got {len(values)} arrays, but the layer has {len(weights)} weights "
                f"({[w.name for w in weights]})"
            )
        arrays = [np.asarray(v) for v in values]
        for w, a in zip(weights, arrays, strict=True):
            if tuple(a.shape) != tuple(w.shape):
                raise ValueError(f"{self.name}: set_weights: weight '{w.name}' has shape {w.shape}, got {a.shape}")
        for w, a in zip(weights, arrays, strict=True):
            w.assign(a)

    # ----- config -----
    def get_config(self) -> dict:
        """The constructor arguments that recreate this layer (without its weights).

        A subclass that does not override this method gets, as in Keras 3, the arguments
        its constructor was called with, if they are plain JSON values (None, bool, int,
        float, str, and lists and dicts of them), beside the base `name`, `trainable` and
        `dtype` (those its constructor accepts). Otherwise it must override `get_config`
        (and `from_config`, if its constructor cannot take the config's entries back).

        >>> import tapeflow as tp
        >>> class Mlp(tp.Model):
        ...     def __init__(self, width=4, **kwargs):
        ...         super().__init__(**kwargs)
        ...         self.hidden = tp.layers.Dense(width)
        ...     def call(self, x):
        ...         return self.hidden(x)
        >>> Mlp(8, name="mlp").get_config()
        {'name': 'mlp', 'trainable': True, 'dtype': 'float32', 'width': 8}
        """
        config = {"name": self.name, "trainable": self.trainable, "dtype": self.dtype_policy.name}
        if self.activity_regularizer is not None:
            config["activity_regularizer"] = serialize_regularizer(self.activity_regularizer)
        cls = type(self)
        if cls.get_config is not Layer.get_config or cls.__init__ is Layer.__init__:
            return config  # called by an override through super(), or nothing to add
        signature = inspect.signature(cls.__init__)
        args, kwargs = getattr(self, "_init_arguments", ((), {}))
        try:
            bound = signature.bind(self, *args, **kwargs).arguments
        except TypeError as err:
            raise NotImplementedError(f"{cls.__name__}.get_config: cannot recover the arguments: {err}") from None
        if not any(p.kind is p.VAR_KEYWORD for p in signature.parameters.values()):
            config = {k: v for k, v in config.items() if k in signature.parameters}
        for key, value in list(bound.items())[1:]:
            kind = signature.parameters[key].kind
            if kind is inspect.Parameter.VAR_POSITIONAL:
                raise NotImplementedError(f"{cls.__name__}.get_config: *{key} cannot be saved; override get_config")
            for name, item in (value if kind is inspect.Parameter.VAR_KEYWORD else {key: value}).items():
                if not _is_plain(item):
                    raise NotImplementedError(
                        f"{cls.__name__}: argument {name}={item!r} of __init__ is not a plain JSON value, "
                        "so override get_config() (and from_config()) to make it serializable"
                    )
                config[name] = item
        return config

    @classmethod
    def from_config(cls, config: dict):
        return cls(**config)

    def __repr__(self) -> str:
        return f"<{type(self).__name__} name={self.name} built={self.built}>"


def _single(values):
    """A one-element list as its element (Keras' `input` and `output`), anything else as is."""
    return values[0] if isinstance(values, list) and len(values) == 1 else values


def _is_plain(value) -> bool:
    if value is None or isinstance(value, bool | int | float | str):
        return True
    if isinstance(value, list | tuple):
        return all(_is_plain(v) for v in value)
    if isinstance(value, dict):
        return all(isinstance(k, str) and _is_plain(v) for k, v in value.items())
    return False


def _marks_built(build):
    @functools.wraps(build)
    def wrapped(self, input_shape):
        if input_shape is not None:
            input_shape = _as_shapes(input_shape)
        build(self, input_shape)
        self.built = True
        if input_shape is not None or not hasattr(self, "_build_input_shape"):
            self._build_input_shape = input_shape

    return wrapped


Layer.build = _marks_built(Layer.build)


class InputLayer(Layer):
    """The entry point of a model: holds the symbolic tensor `output` that `Input` returns.

    As the first entry of a `tp.Sequential` it declares the model's input, so the model is
    built (its weights made) at construction. Calling it passes its input through.

    Args:
        shape: the shape of one example, without the batch axis (None for sizes known later).
        batch_size: a fixed batch size, or None (the default) for any.
        dtype: the dtype of the values fed: floating, or integer (for ids).
        batch_shape: the full shape including the batch axis, instead of `shape` and `batch_size`.
        name: the input's name (by default "input_layer", "input_layer_1", ...).

    >>> import tapeflow as tp
    >>> layer = tp.layers.InputLayer(shape=(3,), dtype="int64")
    >>> layer.output.shape, layer.output.dtype.name, layer.get_config()["batch_shape"]
    ((None, 3), 'int64', (None, 3))
    """

    def __init__(self, shape=None, batch_size=None, dtype="float32", batch_shape=None, name=None):
        super().__init__(name=name or unique_name("input_layer"))
        if (shape is None) == (batch_shape is None):
            raise ValueError(f"{self.name}: give exactly one of shape and batch_shape, got {shape!r}, {batch_shape!r}")
        if batch_shape is not None and batch_size is not None:
            raise ValueError(f"{self.name}: batch_size cannot be combined with batch_shape {batch_shape!r}")
        self.batch_shape = _as_shape(batch_shape) if batch_shape is not None else (batch_size, *_as_shape(shape))
        self.dtype = self.compute_dtype = dtypes.as_dtype(dtype or "float32")  # integer inputs are allowed here
        output = SymbolicTensor(self.batch_shape, self.dtype, self.name)
        output.input_layer = self
        self._first_call = ([], output)  # an input has no inputs of its own, as in Keras
        self.built = True

    def call(self, inputs):
        return inputs

    def get_config(self) -> dict:
        return {"batch_shape": self.batch_shape, "dtype": self.dtype.name, "name": self.name}


class _OutputSpec:
    """The shape and dtype of one output of a symbolic layer call (a leaf of `tapeflow.tree`)."""

    def __init__(self, shape, dtype):
        self.shape, self.dtype = tuple(shape), dtype


def _map_shapes(fn, shapes):
    """fn(shape) for one shape, or a list of fn(shape) for a list of shapes."""
    return [fn(s) for s in shapes] if isinstance(shapes, list) else fn(shapes)


def _probe_copy(value, memo: dict):
    """`value` with every layer in it (found where `weights` finds layers: attributes, lists,
    tuples, dicts) replaced by a shallow copy, and those containers rebuilt, so that the
    copies can be built and called while the originals stay as they are."""
    if isinstance(value, Layer):
        if id(value) not in memo:
            memo[id(value)] = layer = copy.copy(value)
            vars(layer).update({k: _probe_copy(v, memo) for k, v in vars(value).items()})
        return memo[id(value)]
    if isinstance(value, Metric):
        return _MetricAtRest(value)
    if type(value) in (list, tuple):
        return type(value)(_probe_copy(v, memo) for v in value)
    if type(value) is dict:
        return {k: _probe_copy(v, memo) for k, v in value.items()}
    return value


class _Budget(threading.local):
    state = None  # {"left": values still allowed, "source": what bounds them} inside weight_budget


_WEIGHT_BUDGET = _Budget()


@contextlib.contextmanager
def weight_budget(values: int, source: str):
    """Within the block (on this thread), the weights layers create may hold `values` values
    in all; more is a ValueError naming the layer and `source` (what justifies the bound),
    raised before anything is allocated. Loading a model bounds its config this way.

    >>> import tapeflow as tp
    >>> with weight_budget(10, "the test allows"):
    ...     tp.layers.Dense(100).build((None, 3))
    Traceback (most recent call last):
    ...
    ValueError: the config makes layer 'dense...' (Dense) create a weight of 300 values, more than the test allows
    """
    outer = _WEIGHT_BUDGET.state
    _WEIGHT_BUDGET.state = {"left": int(values), "source": source}
    try:
        yield
    finally:
        _WEIGHT_BUDGET.state = outer


def _batch_size(output: Tensor, dtype):
    """The size of axis 0 of `output` as a scalar of `dtype` (counted when the batch is dynamic)."""
    if output.shape[0] is not None:
        return float(output.shape[0])
    column = output[(slice(None),) + (0,) * (output.ndim - 1)]
    return reduce_sum(full_like(cast(column, dtype), 1.0))


class _MetricAtRest:
    """A metric as a shape probe's copy of a layer holds it: updates change nothing (as in
    Keras's symbolic call), everything else is the metric's own."""

    def __init__(self, metric: Metric):
        self._metric = metric

    def update_state(self, *args, **kwargs) -> None:
        pass

    def reset_state(self) -> None:
        pass

    def __getattr__(self, name: str):
        return getattr(self._metric, name)


def layers_in(values):
    """The layers among `values`, also inside lists, tuples and dicts, in order."""
    for value in values:
        if isinstance(value, Layer):
            yield value
        elif isinstance(value, list | tuple):
            yield from layers_in(value)
        elif isinstance(value, dict):
            yield from layers_in(value.values())


# ------------------------------------------------------------ serialization
def _builtin_layer(name: str):
    return serialization.builtin_class(_REGISTRY, name)


def serialize(layer: Layer) -> dict:
    """{'class_name': ..., 'config': ...} (plus 'registered_name' for a registered class),
    the form `deserialize` reads.

    >>> import tapeflow as tp
    >>> config = serialize(tp.layers.Dropout(0.5, name="drop"))
    >>> config["class_name"], type(deserialize(config)).__name__
    ('Dropout', 'Dropout')
    """
    return serialization.serialize(layer)


def deserialize(config: dict, custom_objects: dict | None = None) -> Layer:
    """The layer (or model) a `serialize` dict describes: tapeflow's own classes, classes
    registered with `tp.saving.register_serializable`, or those in `custom_objects`."""
    with serialization.custom_object_scope(custom_objects):
        return serialization.deserialize(config, Layer, _builtin_layer, "layers.deserialize")


def _serialize_object(identifier):
    """A config entry: names stay names, registered functions become their registered
    names, objects with get_config become {"class_name", "config"} dicts; any other
    callable is kept as is (it cannot be saved)."""
    if identifier is None or isinstance(identifier, str | dict):
        return identifier
    if hasattr(identifier, "get_config"):
        return serialization.serialize(identifier)
    return serialization.registered_name(identifier) or identifier


def serialize_initializer(identifier):
    """A config entry for an initializer: names stay names; objects are serialized."""
    return _serialize_object(identifier)


def serialize_regularizer(identifier):
    """A config entry for a regularizer: names stay names; objects are serialized."""
    return _serialize_object(identifier)


def serialize_constraint(identifier):
    """A config entry for a constraint: names stay names; objects are serialized."""
    return _serialize_object(identifier)
