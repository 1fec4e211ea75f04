module github.com/softrdma/softrdma

go 1.26.8

require (
	github.com/gopacket/gopacket v1.7.7
	golang.org/x/net v0.55.0
	golang.org/x/sys v0.45.0
)
