// Performance management (IBTA volume 1 chapter 16.1): the PMA's attribute
// IDs and the codecs of PortCounters, PortCountersExtended and the generic
// ClassPortInfo that every GS class (SA, PMA, CM) answers.

package mad

// PMA attribute IDs (IBTA volume 1 table 224). ClassPortInfo is
// AttrClassPortInfo in every class.
const (
	PerfAttrPortCounters    AttributeID = 0x0012
	PerfAttrPortCountersExt AttributeID = 0x001D
)

var perfAttrNames = map[AttributeID]string{
	AttrClassPortInfo:       "ClassPortInfo",
	PerfAttrPortCounters:    "PortCounters",
	PerfAttrPortCountersExt: "PortCountersExtended",
}

// PerfDataOffset is where a PMA attribute starts in a MAD: the GS header is
// followed by 40 reserved bytes.
const PerfDataOffset = 64
