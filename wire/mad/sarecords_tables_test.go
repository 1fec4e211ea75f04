package mad

import (
	"errors"
	"reflect"
	"testing"
)

// TestSATableRecordComponents checks the component tables of the table
// records: with one key field set to all ones, the encoded record differs
// from the zero record on exactly that field's component; the table a
// record carries differs on no key component (only GuidInfoRecord has
// components, one per GUID, over its table).
func TestSATableRecordComponents(t *testing.T) {
	type rec struct {
		name  string
		zero  any
		comps []Component
		// fields: field name (a path into nested structs with '.') to the
		// component name it must alone change.
		fields map[string]string
	}
	recs := []rec{
		{"SLToVLRecord", SLToVLRecord{}, SLToVLRecordComponents,
			map[string]string{"LID": "LID", "InPort": "InPort", "OutPort": "OutPort", "Table": ""}},
		{"VLArbRecord", VLArbRecord{}, VLArbRecordComponents,
			map[string]string{"LID": "LID", "OutPort": "OutPort", "Block": "Block", "Table": ""}},
		{"PKeyTableRecord", PKeyTableRecord{}, PKeyTableRecordComponents,
			map[string]string{"LID": "LID", "Block": "Block", "Port": "Port", "Table": ""}},
		{"LinearFTRecord", LinearFTRecord{}, LinearFTRecordComponents,
			map[string]string{"LID": "LID", "Block": "Block", "Table": ""}},
		{"MulticastFTRecord", MulticastFTRecord{}, MulticastFTRecordComponents,
			map[string]string{"LID": "LID", "Position": "Position", "Block": "Block", "Table": ""}},
		{"GUIDInfoRecord", GUIDInfoRecord{}, GUIDInfoRecordComponents,
			map[string]string{"LID": "LID", "Block": "Block", "Table": "GUID"}},
		{"SMInfoRecord", SMInfoRecord{}, SMInfoRecordComponents,
			map[string]string{"LID": "LID", "Info.GUID": "GUID", "Info.SMKey": "SMKey", "Info.ActCount": "ActCount",
				"Info.Priority": "Priority", "Info.SMState": "SMState"}},
		{"InformInfoRecord", InformInfoRecord{}, InformInfoRecordComponents,
			map[string]string{"SubscriberGID": "SubscriberGID", "Enum": "Enum", "Info.GID": "GID",
				"Info.LIDRangeBegin": "LIDRangeBegin", "Info.LIDRangeEnd": "LIDRangeEnd",
				"Info.IsGeneric": "IsGeneric", "Info.Subscribe": "Subscribe", "Info.Type": "Type",
				"Info.TrapNumber": "TrapNumber", "Info.QPN": "QPN", "Info.RespTimeValue": "RespTimeValue",
				"Info.ProducerType": "ProducerType"}},
	}
	byName := map[string]attrCodec{}
	for _, c := range saCodecs() {
		byName[c.name] = c
	}
	for _, r := range recs {
		c := byName[r.name]
		zero := make([]byte, c.full)
		c.encode(r.zero, zero)
		for field, compName := range r.fields {
			v := reflect.New(reflect.TypeOf(r.zero)).Elem()
			f := v.FieldByIndex(fieldIndex(t, v.Type(), field))
			if f.Kind() == reflect.Struct {
				// a table: take the sample's
				f.Set(reflect.ValueOf(c.sample).FieldByName(field))
			} else {
				setOnes(f, 64)
			}
			b := make([]byte, c.full)
			c.encode(v.Interface(), b)
			for _, cp := range r.comps {
				differs := !MatchComponents(r.comps, 1<<cp.Bit, zero, b)
				if want := cp.Name == compName; differs != want {
					t.Errorf("%s.%s: component %d (%s) differs %v, want %v", r.name, field, cp.Bit, cp.Name, differs, want)
				}
			}
		}
		owner := make([]bool, 8*len(zero))
		for _, cp := range r.comps {
			for i := cp.Off; i < cp.Off+cp.Len; i++ {
				if int(i) >= len(owner) || owner[i] {
					t.Errorf("%s: component %s overlaps or runs past the record", r.name, cp.Name)
					break
				}
				owner[i] = true
			}
		}
	}
}

func fieldIndex(t *testing.T, typ reflect.Type, path string) []int {
	t.Helper()
	var idx []int
	for path != "" {
		name := path
		for i := range path {
			if path[i] == '.' {
				name, path = path[:i], path[i+1:]
				break
			}
		}
		if name == path {
			path = ""
		}
		f, ok := typ.FieldByName(name)
		if !ok {
			t.Fatalf("no field %s in %s", name, typ)
		}
		idx = append(idx, f.Index...)
		typ = f.Type
	}
	return idx
}

// TestMultiPathRecordGIDs: SGIDCount plus DGIDCount past what fits is
// rejected; Encode leaves out the GIDs that do not fit.
func TestMultiPathRecordGIDs(t *testing.T) {
	x := sampleMultiPathRecord()
	b := make([]byte, MultiPathRecordSize)
	x.Encode(b)
	if b[15] != 2 || b[16] != 3 || b[13] != 0x11 || b[23] != 0x88 {
		t.Errorf("counts %d %d, service ID bytes %#x %#x", b[15], b[16], b[13], b[23])
	}
	b[16] = 10
	if _, err := ParseMultiPathRecord(b); !errors.Is(err, ErrTooLong) {
		t.Errorf("12 GIDs: %v", err)
	}
	for range 12 {
		x.DGIDs = append(x.DGIDs, MakeGID(1, 1))
	}
	x.Encode(b)
	got, err := ParseMultiPathRecord(b)
	if err != nil || len(got.SGIDs) != 2 || len(got.DGIDs) != MultiPathMaxGIDs-2 {
		t.Errorf("encoded %d+%d GIDs: %v", len(got.SGIDs), len(got.DGIDs), err)
	}
}
