// Package onnx is the raw ONNX layer of lumsearch's importer: it reads a
// .onnx model file into the protobuf bindings of package onnxpb, gathers
// its operator set imports, and lifts the main graph's initializers into
// Tensors whose little-endian bytes can be had without caring how the file
// stored them, including tensors kept in external data files.
//
// External data files are memory-mapped read-only, once per file per
// model, and a tensor's bytes are a subslice of the mapping, so a model's
// weights are never copied onto the Go heap; Model.Close unmaps them.
//
// Every error names the file and what is wrong with it, for example
//
//	load model.onnx: initializer "w": external data offset 100+400 past end of w.bin (300 bytes)
//
// and no input, however malformed, makes the package panic.
//
// Converting the graph to lumsearch's tensor IR is a later step, not this
// package's. It imports onnxpb and nothing else of the project.
package onnx

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"

	"google.golang.org/protobuf/proto"

	"github.com/lumsearch/lumsearch/corpus/onnx/onnxpb"
	"github.com/lumsearch/lumsearch/internal/mmap"
)

// Model is a decoded ONNX model with its main graph's initializers. A model
// whose initializers use external data holds memory mappings until Close.
type Model struct {
	// Proto is the decoded model.
	Proto *onnxpb.ModelProto
	// Opsets maps each imported operator set domain to its version. The
	// default ONNX domain is "" (a model's "ai.onnx" is stored as "").
	Opsets map[string]int64
	// Tensors holds every initializer of the main graph by name.
	// Initializers of subgraphs and the values of Constant nodes are not
	// included.
	Tensors map[string]*Tensor

	// mappings holds one read-only mapping per distinct external data
	// file, by cleaned location.
	mappings map[string][]byte
	closed   bool
}

// Load reads and checks the model file at path. External data locations
// are resolved relative to the file's folder and must stay inside it:
// absolute paths, ".." escapes and symbolic links leading out are refused.
func Load(path string) (*Model, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("load model: %w", err)
	}
	return parse(data, filepath.Dir(path), "load "+path)
}

// Parse decodes and checks a serialized ModelProto. dir is the folder that
// external data locations are relative to; with dir "" a tensor with
// external data is an error.
func Parse(data []byte, dir string) (*Model, error) {
	return parse(data, dir, "parse model")
}

// Close unmaps the model's external data files. Bytes returned by Raw for
// external tensors must not be used afterwards, and Raw then fails. Close
// may be called more than once.
func (m *Model) Close() error {
	if m.closed {
		return nil
	}
	m.closed = true
	var errs []error
	for loc, b := range m.mappings {
		if err := mmap.Unmap(b); err != nil {
			errs = append(errs, fmt.Errorf("unmap %s: %w", loc, err))
		}
	}
	m.mappings = nil
	return errors.Join(errs...)
}

func parse(data []byte, dir, label string) (_ *Model, err error) {
	mp := new(onnxpb.ModelProto)
	if err := proto.Unmarshal(data, mp); err != nil {
		return nil, fmt.Errorf("%s: not a serialized ModelProto: %w", label, err)
	}
	m := &Model{Proto: mp, Opsets: map[string]int64{}, Tensors: map[string]*Tensor{}, mappings: map[string][]byte{}}
	defer func() {
		if err != nil {
			m.Close()
		}
	}()
	for _, op := range mp.OpsetImport {
		domain := op.GetDomain()
		if domain == "ai.onnx" {
			domain = ""
		}
		v := op.GetVersion()
		if v < 1 {
			return nil, fmt.Errorf("%s: opset_import of domain %q has version %d", label, op.GetDomain(), v)
		}
		if old, dup := m.Opsets[domain]; dup && old != v {
			return nil, fmt.Errorf("%s: opset_import lists domain %q twice, as versions %d and %d", label, op.GetDomain(), old, v)
		}
		m.Opsets[domain] = v
	}
	g := mp.GetGraph()
	if g == nil {
		return nil, fmt.Errorf("%s: model has no graph", label)
	}
	if len(g.SparseInitializer) > 0 {
		name := g.SparseInitializer[0].GetValues().GetName()
		return nil, fmt.Errorf("%s: sparse initializer %q: sparse initializers are not supported", label, name)
	}
	ext := &externalFiles{dir: dir, m: m}
	defer ext.close()
	for i, tp := range g.Initializer {
		name := tp.GetName()
		if name == "" {
			return nil, fmt.Errorf("%s: initializer %d has no name", label, i)
		}
		if _, dup := m.Tensors[name]; dup {
			return nil, fmt.Errorf("%s: initializer %q appears twice", label, name)
		}
		t, err := newTensor(tp, fmt.Sprintf("%s: initializer %q", label, name))
		if err != nil {
			return nil, err
		}
		if t.external {
			if err := ext.resolve(t); err != nil {
				return nil, fmt.Errorf("%s: %w", t.where, err)
			}
		}
		m.Tensors[name] = t
	}
	return m, nil
}

// externalFiles resolves external data locations inside dir, mapping each
// file once into m.mappings.
type externalFiles struct {
	dir  string
	m    *Model
	root *os.Root // opened on first use
}

func (e *externalFiles) close() {
	if e.root != nil {
		e.root.Close()
	}
}

// resolve parses t's external_data keys, maps the file if it is not mapped
// yet, checks the range and points t at its bytes.
func (e *externalFiles) resolve(t *Tensor) error {
	var location string
	offset, length := int64(0), int64(-1)
	seen := map[string]bool{}
	for _, kv := range t.Proto.ExternalData {
		k, v := kv.GetKey(), kv.GetValue()
		if seen[k] {
			return fmt.Errorf("external_data key %q appears twice", k)
		}
		seen[k] = true
		switch k {
		case "location":
			location = v
		case "offset", "length":
			x, err := strconv.ParseInt(v, 10, 64)
			if err != nil || x < 0 {
				return fmt.Errorf("external data %s %q is not a non-negative integer", k, v)
			}
			if k == "offset" {
				offset = x
			} else {
				length = x
			}
		}
		// Other keys (checksum, ...) are not checked.
	}
	if location == "" {
		return errors.New(`external data has no "location"`)
	}
	if !filepath.IsLocal(location) {
		return fmt.Errorf("external data location %q is not a relative path inside the model's folder", location)
	}
	if e.dir == "" {
		return fmt.Errorf("external data %s, but no folder was given to find it in", location)
	}
	key := filepath.Clean(location)
	mapping, ok := e.m.mappings[key]
	if !ok {
		var err error
		if mapping, err = e.mapFile(key); err != nil {
			return err
		}
		e.m.mappings[key] = mapping
	}
	size := int64(len(mapping))
	want := t.size
	if length < 0 {
		if offset > size {
			return fmt.Errorf("external data offset %d past end of %s (%d bytes)", offset, location, size)
		}
		length = size - offset
	}
	if offset > size || length > size-offset {
		return fmt.Errorf("external data offset %d+%d past end of %s (%d bytes)", offset, length, location, size)
	}
	if length != want {
		return fmt.Errorf("external data length %d in %s, want %d for %s shape %v", length, location, want, DTypeName(t.DType), t.Dims)
	}
	t.ext = mapping[offset : offset+length : offset+length]
	t.model = e.m
	return nil
}

// mapFile maps the regular file at key inside e.dir read-only. os.Root
// keeps symbolic links from leading outside the folder.
func (e *externalFiles) mapFile(key string) ([]byte, error) {
	if e.root == nil {
		root, err := os.OpenRoot(e.dir)
		if err != nil {
			return nil, fmt.Errorf("external data %s: %w", key, err)
		}
		e.root = root
	}
	f, err := e.root.Open(key)
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return nil, fmt.Errorf("external data file %s not found in %s: %w", key, e.dir, err)
		}
		return nil, fmt.Errorf("external data %s: %w", key, err)
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return nil, fmt.Errorf("external data %s: %w", key, err)
	}
	if !fi.Mode().IsRegular() {
		return nil, fmt.Errorf("external data %s is not a regular file", key)
	}
	b, err := mmap.Map(f, fi.Size())
	if err != nil {
		return nil, fmt.Errorf("external data %s: map %d bytes: %w", key, fi.Size(), err)
	}
	return b, nil
}
