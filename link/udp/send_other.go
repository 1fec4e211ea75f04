//go:build !linux

package udp

import (
	"net"

	"golang.org/x/net/ipv4"
)

// newBatchConn returns the batch interface of c: x/net's.
func newBatchConn(c *net.UDPConn, is4 bool) batchConn { return xnetConn(c, is4) }

// newSourceBatchConn returns the batch interface of a source socket, a
// *net.UDPConn here (listenSourceUDP).
func newSourceBatchConn(c sockConn, is4 bool) batchConn { return xnetConn(c.(*net.UDPConn), is4) }

// sysScratch holds nothing elsewhere than Linux: Send writes through x/net.
type sysScratch struct{}

func (x *sysScratch) release() {}

// writeMsgs writes msgs, all from sk, with one WriteBatch.
func (l *Link) writeMsgs(sk *socket, _ *sendScratch, msgs []ipv4.Message) (int, error) {
	return sk.bc.WriteBatch(msgs, sendFlags)
}
