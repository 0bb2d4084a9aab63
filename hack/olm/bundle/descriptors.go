package bundle

import (
	"fmt"
	"go/ast"
	"math"
	"path/filepath"
	"sort"
	"strings"
	"unicode"

	operatorsv1alpha1 "github.com/operator-framework/api/pkg/operators/v1alpha1"
	"golang.org/x/tools/go/packages"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"sigs.k8s.io/controller-tools/pkg/loader"
	"sigs.k8s.io/controller-tools/pkg/markers"
)

// csvMarker is operator-sdk's marker for CSV owned-CRD metadata. On a type it carries the
// displayName and resources of the kind; on a field, a spec or status descriptor.
const csvMarker = "operator-sdk:csv:customresourcedefinitions"

// KindDescription is the CSV metadata of one API kind in one version, read from the Go
// type's doc comment and markers.
type KindDescription struct {
	DisplayName       string
	Description       string
	Resources         []operatorsv1alpha1.APIResourceReference
	SpecDescriptors   []operatorsv1alpha1.SpecDescriptor
	StatusDescriptors []operatorsv1alpha1.StatusDescriptor
}

// kindMarker receives the type-level marker, e.g.
// +operator-sdk:csv:customresourcedefinitions:displayName="Foo",resources={{Deployment,v1,""}}.
type kindMarker struct {
	DisplayName string     `marker:",optional"`
	Resources   [][]string `marker:",optional"`
	Order       *int       `marker:",optional"`
}

// fieldMarker receives the field-level marker, e.g.
// +operator-sdk:csv:customresourcedefinitions:type=spec,displayName="Replicas",xDescriptors={"urn:alm:descriptor:com.tectonic.ui:podCount"}.
type fieldMarker struct {
	Type         string   `marker:",optional"`
	DisplayName  string   `marker:",optional"`
	XDescriptors []string `marker:",optional"`
	Order        *int     `marker:",optional"`
}

func markerRegistry() (*markers.Registry, error) {
	reg := &markers.Registry{}
	for _, def := range []struct {
		name   string
		target markers.TargetType
		out    any
	}{
		{csvMarker, markers.DescribesType, kindMarker{}},
		{csvMarker, markers.DescribesField, fieldMarker{}},
		{"groupName", markers.DescribesPackage, ""},
		{"kubebuilder:object:root", markers.DescribesType, false},
	} {
		d, err := markers.MakeDefinition(def.name, def.target, def.out)
		if err != nil {
			return nil, err
		}
		if err := reg.Register(d); err != nil {
			return nil, err
		}
	}
	return reg, nil
}

// LoadKindDescriptions reads the API packages under root/api and returns the CSV metadata
// of every root kind (a type marked +kubebuilder:object:root that has a spec), keyed by
// group, version (the package name) and kind.
func LoadKindDescriptions(root string) (map[schema.GroupVersionKind]KindDescription, error) {
	root, err := filepath.Abs(root)
	if err != nil {
		return nil, err
	}
	pkgs, err := loader.LoadRootsWithConfig(&packages.Config{Dir: root}, filepath.Join(root, "api")+"/...")
	if err != nil {
		return nil, fmt.Errorf("load API packages: %w", err)
	}
	reg, err := markerRegistry()
	if err != nil {
		return nil, err
	}
	col := &markers.Collector{Registry: reg}
	out := map[schema.GroupVersionKind]KindDescription{}
	for _, pkg := range pkgs {
		if len(pkg.Errors) > 0 {
			return nil, fmt.Errorf("load %s: %w", pkg.PkgPath, pkg.Errors[0])
		}
		pkgMarkers, err := markers.PackageMarkers(col, pkg)
		if err != nil {
			return nil, fmt.Errorf("read markers of %s: %w", pkg.PkgPath, err)
		}
		group, _ := pkgMarkers.Get("groupName").(string)
		if group == "" {
			continue
		}
		types := map[string]*markers.TypeInfo{}
		if err := markers.EachType(col, pkg, func(info *markers.TypeInfo) { types[info.Name] = info }); err != nil {
			return nil, fmt.Errorf("read types of %s: %w", pkg.PkgPath, err)
		}
		for name, info := range types {
			if root, _ := info.Markers.Get("kubebuilder:object:root").(bool); !root || fieldByJSONName(info, "spec") == nil {
				continue
			}
			desc, err := describeKind(info, types)
			if err != nil {
				return nil, fmt.Errorf("%s.%s: %w", pkg.PkgPath, name, err)
			}
			out[schema.GroupVersionKind{Group: group, Version: pkg.Name, Kind: name}] = desc
		}
	}
	return out, nil
}

func describeKind(info *markers.TypeInfo, types map[string]*markers.TypeInfo) (KindDescription, error) {
	desc := KindDescription{DisplayName: displayName(info.Name), Description: oneParagraph(info.Doc)}
	for _, v := range info.Markers[csvMarker] {
		m, ok := v.(kindMarker)
		if !ok {
			continue
		}
		if m.DisplayName != "" {
			desc.DisplayName = m.DisplayName
		}
		for _, r := range m.Resources {
			if len(r) < 2 || len(r) > 3 {
				return desc, fmt.Errorf("resources entry %q: want {kind,version} or {kind,version,name}", r)
			}
			ref := operatorsv1alpha1.APIResourceReference{Kind: strings.TrimSpace(r[0]), Version: strings.TrimSpace(r[1])}
			if len(r) == 3 {
				ref.Name = strings.TrimSpace(r[2])
			}
			desc.Resources = append(desc.Resources, ref)
		}
	}
	sort.SliceStable(desc.Resources, func(i, j int) bool {
		a, b := desc.Resources[i], desc.Resources[j]
		if a.Name != b.Name {
			return a.Name < b.Name
		}
		return a.Kind < b.Kind
	})

	for _, part := range []string{"spec", "status"} {
		field := fieldByJSONName(info, part)
		if field == nil {
			continue
		}
		var found []descriptor
		walkFields(field, part, nil, types, map[string]bool{}, &found)
		sortDescriptors(found)
		for _, d := range found {
			switch part {
			case "spec":
				desc.SpecDescriptors = append(desc.SpecDescriptors, operatorsv1alpha1.SpecDescriptor{
					Path: d.path, DisplayName: d.displayName, Description: d.description, XDescriptors: d.xDescriptors})
			case "status":
				desc.StatusDescriptors = append(desc.StatusDescriptors, operatorsv1alpha1.StatusDescriptor{
					Path: d.path, DisplayName: d.displayName, Description: d.description, XDescriptors: d.xDescriptors})
			}
		}
	}
	return desc, nil
}

// descriptor is one marked field found under spec or status.
type descriptor struct {
	path         string
	displayName  string
	description  string
	xDescriptors []string
	order        int
}

// walkFields collects the descriptors of the fields of the struct type that field holds,
// recursing into struct types of the same package. Paths are dotted JSON names below
// spec or status; a field inside a list element gets the list's name with "[0]", as
// operator-sdk writes it.
func walkFields(field *markers.FieldInfo, part string, prefix []string, types map[string]*markers.TypeInfo, visiting map[string]bool, out *[]descriptor) {
	typeName, isList := localTypeName(field.RawField.Type)
	info := types[typeName]
	if info == nil || visiting[typeName] {
		return
	}
	visiting[typeName] = true
	defer delete(visiting, typeName)
	if isList && len(prefix) > 0 {
		prefix = append(prefix[:len(prefix)-1:len(prefix)-1], prefix[len(prefix)-1]+"[0]")
	}
	for i := range info.Fields {
		f := &info.Fields[i]
		name, inline, skip := jsonName(f)
		if skip {
			continue
		}
		path := prefix
		if !inline {
			path = append(prefix[:len(prefix):len(prefix)], name)
			if d, ok := fieldDescriptor(f, part, path); ok {
				*out = append(*out, d)
			}
		}
		walkFields(f, part, path, types, visiting, out)
	}
}

func fieldDescriptor(f *markers.FieldInfo, part string, path []string) (descriptor, bool) {
	d := descriptor{path: strings.Join(path, "."), description: oneParagraph(f.Doc), order: math.MaxInt}
	seen := false
	for _, v := range f.Markers[csvMarker] {
		m, ok := v.(fieldMarker)
		if !ok || m.Type != part {
			continue
		}
		seen = true
		if d.displayName == "" {
			d.displayName = m.DisplayName
		}
		if m.Order != nil {
			d.order = *m.Order
		}
		d.xDescriptors = append(d.xDescriptors, m.XDescriptors...)
	}
	if d.displayName == "" {
		d.displayName = displayName(f.Name)
	}
	return d, seen
}

// sortDescriptors orders by the markers' order, then by path.
func sortDescriptors(ds []descriptor) {
	sort.SliceStable(ds, func(i, j int) bool {
		if ds[i].order != ds[j].order {
			return ds[i].order < ds[j].order
		}
		return ds[i].path < ds[j].path
	})
}

func fieldByJSONName(info *markers.TypeInfo, name string) *markers.FieldInfo {
	for i := range info.Fields {
		if n, _, skip := jsonName(&info.Fields[i]); !skip && n == name {
			return &info.Fields[i]
		}
	}
	return nil
}

// jsonName returns the field's JSON name, whether it is inlined, and whether it is not
// serialised at all.
func jsonName(f *markers.FieldInfo) (name string, inline, skip bool) {
	tag, ok := f.Tag.Lookup("json")
	if !ok {
		return f.Name, f.Name == "", false
	}
	parts := strings.Split(tag, ",")
	if parts[0] == "-" && len(parts) == 1 {
		return "", false, true
	}
	for _, opt := range parts[1:] {
		if opt == "inline" {
			return "", true, false
		}
	}
	if parts[0] == "" {
		return f.Name, false, false
	}
	return parts[0], false, false
}

// localTypeName returns the name of a type declared in the same package that expr refers
// to, through pointers, slices and maps, and whether a slice was crossed.
func localTypeName(expr ast.Expr) (string, bool) {
	isList := false
	for {
		switch t := expr.(type) {
		case *ast.Ident:
			return t.Name, isList
		case *ast.StarExpr:
			expr = t.X
		case *ast.ArrayType:
			isList = true
			expr = t.Elt
		case *ast.MapType:
			expr = t.Value
		default:
			// Types from other packages (metav1.Time, …) are leaves.
			return "", false
		}
	}
}

// displayName turns a Go or JSON name into words: "StorageBucket" → "Storage Bucket",
// "caBundle" → "Ca Bundle", "S3Endpoint" → "S3 Endpoint".
func displayName(name string) string {
	runes := []rune(name)
	var b strings.Builder
	for i, r := range runes {
		if i > 0 && unicode.IsUpper(r) {
			prev := runes[i-1]
			nextLower := i+1 < len(runes) && unicode.IsLower(runes[i+1])
			if unicode.IsLower(prev) || unicode.IsDigit(prev) || (unicode.IsUpper(prev) && nextLower) {
				b.WriteByte(' ')
			}
		}
		if i == 0 {
			r = unicode.ToUpper(r)
		}
		b.WriteRune(r)
	}
	return b.String()
}

// oneParagraph joins a doc comment into one line per paragraph, as it reads in a console.
func oneParagraph(doc string) string {
	paras := strings.Split(strings.TrimSpace(doc), "\n\n")
	for i, p := range paras {
		paras[i] = strings.Join(strings.Fields(p), " ")
	}
	return strings.Join(paras, "\n\n")
}
