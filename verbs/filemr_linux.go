package verbs

// fileMapping says RegFile can map files on this platform.
const fileMapping = true
