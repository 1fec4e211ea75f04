//go:build !linux

package verbs

// fileMapping says RegFile can map files on this platform.
const fileMapping = false
