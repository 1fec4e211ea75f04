//go:build !linux

package udp

import "errors"

type ifWatch struct{}

func watchInterface(string) (*ifWatch, bool, error) {
	return nil, false, errors.New("udp: following an interface's state needs Linux netlink")
}

func (*ifWatch) run(func(bool)) {}
func (*ifWatch) close() error   { return nil }
