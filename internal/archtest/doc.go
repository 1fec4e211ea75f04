// Package archtest holds the test that enforces the import rules of
// docs/DESIGN.md: each package of the module sits in a layer and imports
// only packages of lower layers. It has no code of its own.
package archtest
