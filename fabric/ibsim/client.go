package ibsim

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"strconv"
	"sync"
	"time"
)

// ClientConfig configures a Client. The zero value connects to a unix
// server on ibsim's default names as the default node, as libumad2sim does
// without SIM_HOST.
type ClientConfig struct {
	Network  string // "unix" (default) or "udp"
	SockName string // base of the unix names; empty means DefaultBase
	Addr     string // udp: the server's control host:port; empty means 127.0.0.1:7070
	ID       uint32 // unix: the id in the socket names; 0 means the pid
	Node     string // the node to attach at (SIM_HOST); empty for the default
	IsSM     bool   // connect as an SM (SIM_SET_ISSM)
	QP       uint32 // the QP the client serves besides 0 and 1
}

// ErrRefused means the server answered a control message with CtlError.
var ErrRefused = errors.New("ibsim: refused by the server")

// Client speaks ibsim's client protocol from Go, as libumad2sim does: it
// connects to a server (Linux ibsim or this package's Server), asks control
// questions and exchanges MAD requests.
type Client struct {
	ctl, in *net.UnixConn
	uctl    *net.UDPConn
	uin     *net.UDPConn
	cconn   net.Conn // ctl, either kind
	dconn   net.Conn // in, either kind
	slot    uint32
	node    string
	srvData net.Addr // the slot's server socket
	mu      sync.Mutex
}

// Dial connects to a server and returns the client attached at its node.
func Dial(ctx context.Context, cfg ClientConfig) (*Client, error) {
	c := &Client{}
	var id uint32
	var err error
	switch cfg.Network {
	case "", "unix":
		base := cfg.SockName
		if base == "" {
			base = DefaultBase
		}
		id = cfg.ID
		if id == 0 {
			id = uint32(os.Getpid())
		}
		ids := strconv.FormatUint(uint64(id), 10)
		if c.ctl, err = net.DialUnix("unixgram", abstract(base+":ctl"+ids), abstract(base+":ctl")); err != nil {
			return nil, fmt.Errorf("ibsim: control socket: %w", err)
		}
		c.cconn = c.ctl
		// The input socket exists before CONNECT: ibsim connects the
		// slot's socket to it while answering.
		if c.in, err = net.ListenUnixgram("unixgram", abstract(base+":in"+ids)); err != nil {
			c.ctl.Close()
			return nil, fmt.Errorf("ibsim: input socket: %w", err)
		}
		c.dconn = c.in
		if err = c.connect(ctx, id, cfg); err != nil {
			c.ctl.Close()
			c.in.Close()
			return nil, err
		}
		c.srvData = abstract(base + ":out" + strconv.Itoa(int(c.slot)))
		return c, nil
	case "udp":
		addr := cfg.Addr
		if addr == "" {
			addr = "127.0.0.1:" + strconv.Itoa(DefaultPort)
		}
		srv, rerr := net.ResolveUDPAddr("udp4", addr)
		if rerr != nil {
			return nil, fmt.Errorf("%w: %v", ErrConfig, rerr)
		}
		if c.uctl, err = net.DialUDP("udp4", nil, srv); err != nil {
			return nil, fmt.Errorf("ibsim: control socket: %w", err)
		}
		c.cconn = c.uctl
		if c.uin, err = net.ListenUDP("udp4", &net.UDPAddr{}); err != nil {
			c.uctl.Close()
			return nil, fmt.Errorf("ibsim: input socket: %w", err)
		}
		c.dconn = c.uin
		id = uint32(c.uin.LocalAddr().(*net.UDPAddr).Port)
		if err = c.connect(ctx, id, cfg); err != nil {
			c.uctl.Close()
			c.uin.Close()
			return nil, err
		}
		c.srvData = &net.UDPAddr{IP: srv.IP, Port: srv.Port + int(c.slot) + 1}
		return c, nil
	default:
		return nil, fmt.Errorf("%w: network %q", ErrConfig, cfg.Network)
	}
}

func (c *Client) connect(ctx context.Context, id uint32, cfg ClientConfig) error {
	ci := ClientInfo{ID: id, QP: cfg.QP, NodeID: cfg.Node}
	if cfg.IsSM {
		ci.IsSM = 1
	}
	var data [ClientInfoSize]byte
	ci.Encode(data[:])
	out, err := c.Ctl(ctx, CtlConnect, data[:])
	if err != nil {
		return err
	}
	ci, err = ParseClientInfo(out)
	if err != nil {
		return err
	}
	if ci.ID >= MaxClients {
		return fmt.Errorf("ibsim: server gave slot %d", ci.ID)
	}
	c.slot, c.node = ci.ID, ci.NodeID
	return nil
}

// Slot returns the client's slot on the server.
func (c *Client) Slot() int { return int(c.slot) }

// NodeName returns the name of the node the server attached the client at.
func (c *Client) NodeName() string { return c.node }

func deadline(ctx context.Context) time.Time {
	if d, ok := ctx.Deadline(); ok {
		return d
	}
	return time.Now().Add(5 * time.Second)
}

// Ctl sends a control message of type t with data (at most CtlDataSize
// bytes) and returns the reply's data. A CtlError reply is ErrRefused.
func (c *Client) Ctl(ctx context.Context, t CtlType, data []byte) ([]byte, error) {
	if len(data) > CtlDataSize {
		return nil, fmt.Errorf("%w: %d bytes of control data", ErrTooLong, len(data))
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	m := Ctl{Magic: Magic, ClientID: c.slot, Type: t, Len: uint32(len(data))}
	copy(m.Data[:], data)
	if _, err := c.cconn.Write(m.Append(nil)); err != nil {
		return nil, fmt.Errorf("ibsim: %v: %w", t, err)
	}
	stop := context.AfterFunc(ctx, func() { c.cconn.SetReadDeadline(time.Now()) })
	defer stop()
	c.cconn.SetReadDeadline(deadline(ctx))
	buf := make([]byte, CtlSize+1)
	n, err := c.cconn.Read(buf)
	if err != nil {
		return nil, fmt.Errorf("ibsim: %v reply: %w", t, err)
	}
	r, err := ParseCtl(buf[:n])
	if err != nil {
		return nil, err
	}
	if r.Type == CtlError {
		return nil, fmt.Errorf("%w: %v", ErrRefused, t)
	}
	return r.Data[:], nil
}

// Send sends a MAD request to the server.
func (c *Client) Send(r *Request) error {
	b := r.Append(nil)
	_, err := c.dconn.(net.PacketConn).WriteTo(b, c.srvData)
	return err
}

// Recv returns the next MAD request the server sends the client.
func (c *Client) Recv(ctx context.Context) (Request, error) {
	stop := context.AfterFunc(ctx, func() { c.dconn.SetReadDeadline(time.Now()) })
	defer stop()
	c.dconn.SetReadDeadline(deadline(ctx))
	buf := make([]byte, 2*RequestSize)
	n, err := c.dconn.Read(buf)
	if err != nil {
		if ctx.Err() != nil {
			return Request{}, ctx.Err()
		}
		return Request{}, err
	}
	return ParseRequest(buf[:n])
}

// Close disconnects from the server and closes the sockets.
func (c *Client) Close() error {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	_, err := c.Ctl(ctx, CtlDisconnect, nil)
	c.cconn.Close()
	c.dconn.Close()
	return err
}
