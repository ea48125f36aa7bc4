package torch

import (
	"errors"

	"github.com/snapd-ml/snapd/formats"
	"github.com/snapd-ml/snapd/formats/pickle"
	"github.com/snapd-ml/snapd/snapshot"
)

// The torch values the resolver's globals build inside the pickle
// machine's plain data (see formats/pickle).
type (
	// tensorVal is a tensor rebuilt by _rebuild_tensor[_v2|_v3] or a
	// Parameter wrapping one.
	tensorVal struct {
		st           *storageVal
		dtype        snapshot.DType
		offset       int64
		size         []int64
		stride       []int64
		requiresGrad bool
		param        bool
	}
	// storageVal is a storage named by a persistent id: key, the dtype of
	// its class (U8 for an untyped storage) and element count and, in the
	// legacy format, a view of a root storage.
	storageVal struct {
		key     string
		dtype   snapshot.DType
		numel   int64
		viewOff int64 // legacy storage views: element offset into the root
	}
	// storageClass is the Value of a storage class global.
	storageClass struct {
		dtype   snapshot.DType
		untyped bool
	}
	// dtypeVal is the Value of a dtype global (torch.float8_e4m3fn);
	// dtype is Invalid for dtypes snapd has no counterpart for.
	dtypeVal struct {
		name  string
		dtype snapshot.DType
	}
)

// unpickler limits of the result walk.
const (
	maxDepth = pickle.DefaultMaxDepth // nested containers (see walk)
	maxNodes = 1 << 20                // values visited when walking the result (shared references count each time)
)

// Globals. The allowlist is the part of torch's weights_only loader
// (torch/_weights_only_unpickler.py, torch 2.6) that describes dense
// tensors and plain data; the rest of that list is named as unsupported,
// anything else as refused.
const (
	gOrderedDict      = "collections.OrderedDict"
	gRebuildTensorV3  = "torch._utils._rebuild_tensor_v3"
	gRebuildTensorV2  = "torch._utils._rebuild_tensor_v2"
	gRebuildTensor    = "torch._utils._rebuild_tensor"
	gRebuildParameter = "torch._utils._rebuild_parameter"
	gRebuildParamSt   = "torch._utils._rebuild_parameter_with_state"
	gRebuildFromType  = "torch._tensor._rebuild_from_type_v2"
	gParameter        = "torch.nn.parameter.Parameter"
	gTensor           = "torch.Tensor"
	gSize             = "torch.Size"
	gDevice           = "torch.device"
)

// storageClasses maps torch's typed storage class names to dtypes.
var storageClasses = map[string]snapshot.DType{
	"DoubleStorage": snapshot.F64, "FloatStorage": snapshot.F32, "HalfStorage": snapshot.F16,
	"BFloat16Storage": snapshot.BF16, "LongStorage": snapshot.I64, "IntStorage": snapshot.I32,
	"ShortStorage": snapshot.I16, "CharStorage": snapshot.I8, "ByteStorage": snapshot.U8,
	"BoolStorage": snapshot.Bool, "ComplexFloatStorage": snapshot.C64, "ComplexDoubleStorage": snapshot.C128,
}

// torchDTypeNames maps torch dtype names (torch.<name>) to snapshot
// dtypes, and back through dtypeNameOf.
var torchDTypeNames = map[string]snapshot.DType{
	"float64": snapshot.F64, "float32": snapshot.F32, "float16": snapshot.F16, "bfloat16": snapshot.BF16,
	"int64": snapshot.I64, "int32": snapshot.I32, "int16": snapshot.I16, "int8": snapshot.I8,
	"uint64": snapshot.U64, "uint32": snapshot.U32, "uint16": snapshot.U16, "uint8": snapshot.U8,
	"bool": snapshot.Bool, "complex64": snapshot.C64, "complex128": snapshot.C128,
	"float8_e4m3fn": snapshot.F8E4M3, "float8_e5m2": snapshot.F8E5M2, "float8_e8m0fnu": snapshot.F8E8M0,
}

// otherDTypes are dtype globals torch's weights_only loader accepts that
// have no snapshot counterpart: they resolve, a tensor of them is
// unsupported.
var otherDTypes = map[string]bool{
	"complex32": true, "float8_e4m3fnuz": true, "float8_e5m2fnuz": true, "qint8": true, "quint8": true,
	"qint32": true, "quint4x2": true, "quint2x4": true, "bits1x8": true, "bits2x4": true, "bits4x2": true,
	"bits8": true, "bits16": true, "uint1": true, "uint2": true, "uint3": true, "uint4": true, "uint5": true,
	"uint6": true, "uint7": true, "int1": true, "int2": true, "int3": true, "int4": true, "int5": true,
	"int6": true, "int7": true, "float4_e2m1fn_x2": true,
}

// weightsOnlyOther lists globals torch's weights_only loader accepts but
// this codec does not read (sparse, quantized, meta, subclass tensors).
var weightsOnlyOther = map[string]bool{
	"torch._utils._rebuild_sparse_tensor": true, "torch._utils._rebuild_sparse_csr_tensor": true,
	"torch._utils._rebuild_meta_tensor_no_storage": true, "torch._utils._rebuild_qtensor": true,
	"torch._utils._rebuild_wrapper_subclass": true, "torch._utils._rebuild_device_tensor_from_numpy": true,
	"torch._utils._rebuild_device_tensor_from_cpu_tensor": true,
	"torch.serialization._get_layout":                     true, "collections.Counter": true,
	"torch.QInt8Storage": true, "torch.QUInt8Storage": true, "torch.QInt32Storage": true,
	"torch.QUInt4x2Storage": true, "torch.QUInt2x4Storage": true, "torch.ComplexHalfStorage": true,
	"torch.per_tensor_affine": true, "torch.per_tensor_symmetric": true, "torch.per_channel_affine": true,
	"torch.per_channel_symmetric": true, "torch.per_channel_affine_float_qparams": true,
}

// resolve is the allowlist of the torch codec (see the package
// documentation).
func resolve(mod, name string) (*pickle.Global, error) {
	full := mod + "." + name
	g := &pickle.Global{Module: mod, Name: name}
	switch full {
	case gOrderedDict, "_codecs.encode", "builtins.set", "builtins.frozenset", "builtins.bytearray", "builtins.complex",
		"__builtin__.set", "__builtin__.frozenset", "__builtin__.bytearray", "__builtin__.complex":
		return pickle.PlainGlobal(mod, name), nil
	case gRebuildTensorV2, gRebuildTensor, gRebuildTensorV3:
		g.Call = func(args []any) (any, error) { return rebuildTensor(full, args) }
		return g, nil
	case gRebuildParameter, gRebuildParamSt, gParameter:
		g.Call = func(args []any) (any, error) { return rebuildParameter(full, args) }
		return g, nil
	case gRebuildFromType:
		g.Call = rebuildFromType
		return g, nil
	case gTensor:
		return g, nil
	case gSize:
		g.Call = func(args []any) (any, error) {
			if len(args) == 0 {
				return pickle.NewTuple(), nil
			}
			if t, ok := args[0].(*pickle.Tuple); ok && len(args) == 1 {
				return t, nil
			}
			return nil, pickle.Fail(formats.ErrCorrupt, "torch.Size of %s", pickle.TypeName(args[0]))
		}
		return g, nil
	case gDevice:
		// torch.device("cpu") or ("cuda", 0): the location of a storage,
		// which snapd does not keep; the device reads as its type name.
		g.Call = func(args []any) (any, error) {
			if len(args) >= 1 && len(args) <= 2 {
				if s, ok := args[0].(string); ok {
					return s, nil
				}
			}
			return nil, pickle.Fail(formats.ErrCorrupt, "torch.device of %d arguments", len(args))
		}
		return g, nil
	case "torch.UntypedStorage", "torch.storage.UntypedStorage", "torch._UntypedStorage", "torch.storage._UntypedStorage":
		g.Value = storageClass{dtype: snapshot.U8, untyped: true}
		return g, nil
	}
	if mod == "torch" {
		if dt, ok := storageClasses[name]; ok {
			g.Value = storageClass{dtype: dt}
			return g, nil
		}
		if dt, ok := torchDTypeNames[name]; ok {
			g.Value = dtypeVal{name: name, dtype: dt}
			return g, nil
		}
		if otherDTypes[name] {
			g.Value = dtypeVal{name: name}
			return g, nil
		}
	}
	if weightsOnlyOther[full] {
		return nil, pickle.Fail(formats.ErrUnsupported, "global %s (allowed by torch's weights_only loader) is not supported", pickle.PrintableName(full))
	}
	return nil, pickle.Fail(pickle.ErrRefused, "global %s is not allowed (only torch's weights_only globals are)", pickle.PrintableName(full))
}

func emptyDict(v any) bool {
	d, ok := v.(*pickle.Dict)
	return v == nil || ok && d.Len() == 0
}

// rebuildTensor implements _rebuild_tensor(storage, offset, size,
// stride), _rebuild_tensor_v2(..., requires_grad, backward_hooks[,
// metadata]) and _rebuild_tensor_v3(..., requires_grad, backward_hooks,
// dtype[, metadata]).
func rebuildTensor(name string, args []any) (any, error) {
	lo, hi := 4, 4
	switch name {
	case gRebuildTensorV2:
		lo, hi = 6, 7
	case gRebuildTensorV3:
		lo, hi = 7, 8
	}
	if len(args) < lo || len(args) > hi {
		return nil, pickle.Fail(formats.ErrCorrupt, "%s with %d arguments", name, len(args))
	}
	st, ok := args[0].(*storageVal)
	if !ok {
		return nil, pickle.Fail(formats.ErrCorrupt, "%s: storage argument is a %s", name, pickle.TypeName(args[0]))
	}
	off, ok1 := pickle.AsInt(args[1])
	size, ok2 := pickle.AsInts(args[2])
	stride, ok3 := pickle.AsInts(args[3])
	if !ok1 || !ok2 || !ok3 || len(size) != len(stride) {
		return nil, pickle.Fail(formats.ErrCorrupt, "%s: malformed offset, size or stride", name)
	}
	t := &tensorVal{st: st, dtype: st.dtype, offset: off, size: size, stride: stride}
	if len(args) >= 6 {
		rg, ok := args[4].(bool)
		if !ok {
			return nil, pickle.Fail(formats.ErrCorrupt, "%s: requires_grad is a %s", name, pickle.TypeName(args[4]))
		}
		t.requiresGrad = rg
		if !emptyDict(args[5]) {
			return nil, pickle.Fail(formats.ErrUnsupported, "%s: tensor with backward hooks", name)
		}
	}
	meta := 6
	if name == gRebuildTensorV3 {
		meta = 7
		g, ok := args[6].(*pickle.Global)
		dv, ok2 := dtypeOf(g)
		if !ok || !ok2 {
			return nil, pickle.Fail(formats.ErrCorrupt, "%s: dtype argument is a %s", name, pickle.TypeName(args[6]))
		}
		if dv.dtype == snapshot.Invalid {
			return nil, pickle.Fail(formats.ErrUnsupported, "%s: dtype torch.%s", name, dv.name)
		}
		if st.dtype != snapshot.U8 && st.dtype != dv.dtype {
			return nil, pickle.Fail(formats.ErrCorrupt, "%s: dtype torch.%s of a %s storage", name, dv.name, st.dtype)
		}
		t.dtype = dv.dtype
	}
	if len(args) > meta && !emptyDict(args[meta]) {
		return nil, pickle.Fail(formats.ErrUnsupported, "%s: tensor with metadata", name)
	}
	return t, nil
}

func dtypeOf(g *pickle.Global) (dtypeVal, bool) {
	if g == nil {
		return dtypeVal{}, false
	}
	dv, ok := g.Value.(dtypeVal)
	return dv, ok
}

// rebuildParameter implements _rebuild_parameter(data, requires_grad,
// backward_hooks), _rebuild_parameter_with_state(..., state) (empty
// state) and Parameter(data[, requires_grad]).
func rebuildParameter(name string, args []any) (any, error) {
	if len(args) < 1 || len(args) > 4 {
		return nil, pickle.Fail(formats.ErrCorrupt, "%s with %d arguments", name, len(args))
	}
	t, ok := args[0].(*tensorVal)
	if !ok {
		return nil, pickle.Fail(formats.ErrCorrupt, "%s of a %s", name, pickle.TypeName(args[0]))
	}
	p := *t
	p.param = true
	p.requiresGrad = true
	if len(args) >= 2 {
		rg, ok := args[1].(bool)
		if !ok {
			return nil, pickle.Fail(formats.ErrCorrupt, "%s: requires_grad is a %s", name, pickle.TypeName(args[1]))
		}
		p.requiresGrad = rg
	}
	if len(args) >= 3 && !emptyDict(args[2]) {
		return nil, pickle.Fail(formats.ErrUnsupported, "%s with backward hooks", name)
	}
	if len(args) >= 4 && !emptyDict(args[3]) {
		return nil, pickle.Fail(formats.ErrUnsupported, "%s with state", name)
	}
	return &p, nil
}

// rebuildFromType implements _rebuild_from_type_v2(func, type, args,
// state) for a plain torch.Tensor or Parameter type without state: the
// result of func(*args).
func rebuildFromType(args []any) (any, error) {
	if len(args) != 4 {
		return nil, pickle.Fail(formats.ErrCorrupt, "%s with %d arguments", gRebuildFromType, len(args))
	}
	fn, ok1 := args[0].(*pickle.Global)
	typ, ok2 := args[1].(*pickle.Global)
	targs, ok3 := args[2].(*pickle.Tuple)
	if !ok1 || !ok2 || !ok3 || fn.Call == nil {
		return nil, pickle.Fail(formats.ErrCorrupt, "%s: malformed arguments", gRebuildFromType)
	}
	if n := typ.FullName(); n != gTensor && n != gParameter {
		return nil, pickle.Fail(formats.ErrUnsupported, "%s: tensor subclass %s", gRebuildFromType, pickle.PrintableName(n))
	}
	if !emptyDict(args[3]) {
		return nil, pickle.Fail(formats.ErrUnsupported, "%s: tensor with attributes", gRebuildFromType)
	}
	return fn.Call(targs.Items)
}

// classOf maps a pickle error's class to this codec's sentinel.
func classOf(err error) error {
	switch {
	case errors.Is(err, pickle.ErrRefused):
		return ErrRefused
	case errors.Is(err, formats.ErrLimit):
		return ErrLimit
	case errors.Is(err, formats.ErrUnsupported):
		return ErrUnsupported
	}
	return ErrCorrupt
}

func truncate(s string, n int) string {
	if len(s) > n {
		return s[:n] + "..."
	}
	return s
}
