package sim

import (
	"fmt"
	"math/bits"
	"net/netip"
)

// maxPodIPs caps how many addresses of the pod CIDR the allocator hands out:
// a /8 or an IPv6 /64 is used only for its first 65,536 addresses.
const maxPodIPs = 1 << 16

// ipAllocator hands out pod IPs from one CIDR, lowest free address first,
// skipping the network address and (when inside the cap) the broadcast
// address. Its state is a bitmap of offsets from the network address that
// grows only up to the highest offset ever used: a node running 110 pods
// keeps two words, not a map of every address.
type ipAllocator struct {
	prefix netip.Prefix // masked
	limit  uint32       // offsets in [1, limit) are usable
	used   []uint64     // bit i set: offset i is taken
	inUse  uint32
	hint   int // words before used[hint] are full
}

func newIPAllocator(cidr string) (*ipAllocator, error) {
	prefix, err := netip.ParsePrefix(cidr)
	if err != nil {
		return nil, fmt.Errorf("parse pod CIDR: %w", err)
	}
	prefix = prefix.Masked()
	hostBits := prefix.Addr().BitLen() - prefix.Bits()
	limit := uint32(maxPodIPs)
	if hostBits <= 16 {
		limit = uint32(1)<<hostBits - 1 // the last address is the broadcast address
	}
	if limit <= 1 {
		return nil, fmt.Errorf("pod CIDR %s has no usable addresses", cidr)
	}
	// Offset 0, the network address, is marked taken once and never counted.
	return &ipAllocator{prefix: prefix, limit: limit, used: []uint64{1}}, nil
}

// allocate takes the lowest free address. It returns its offset (never 0)
// and the address.
func (a *ipAllocator) allocate() (uint32, netip.Addr, error) {
	if a.inUse >= a.limit-1 {
		return 0, netip.Addr{}, fmt.Errorf("no free pod IP left in %s", a.prefix)
	}
	for a.hint < len(a.used) && a.used[a.hint] == ^uint64(0) {
		a.hint++
	}
	off := uint32(len(a.used) * 64) // past the bitmap unless a hole is found
	if a.hint < len(a.used) {
		off = uint32(a.hint*64 + bits.TrailingZeros64(^a.used[a.hint]))
	}
	if off >= a.limit {
		return 0, netip.Addr{}, fmt.Errorf("no free pod IP left in %s", a.prefix)
	}
	a.set(off)
	return off, a.addr(off), nil
}

// reserve marks ip as taken, for a pod restored with the IP it already had.
// It returns the offset to release later, or 0 if ip is outside the usable
// range or already taken (then nothing is reserved and nothing will be
// released).
func (a *ipAllocator) reserve(ip string) uint32 {
	addr, err := netip.ParseAddr(ip)
	if err != nil || !a.prefix.Contains(addr.Unmap()) {
		return 0
	}
	off, ok := a.offset(addr.Unmap())
	if !ok || a.isSet(off) {
		return 0
	}
	a.set(off)
	return off
}

// release frees an offset returned by allocate or reserve; 0 is ignored.
func (a *ipAllocator) release(off uint32) {
	if off == 0 || !a.isSet(off) {
		return
	}
	a.used[off/64] &^= 1 << (off % 64)
	a.inUse--
	a.hint = min(a.hint, int(off/64))
}

func (a *ipAllocator) set(off uint32) {
	for int(off/64) >= len(a.used) {
		a.used = append(a.used, 0)
	}
	a.used[off/64] |= 1 << (off % 64)
	a.inUse++
}

func (a *ipAllocator) isSet(off uint32) bool {
	return int(off/64) < len(a.used) && a.used[off/64]&(1<<(off%64)) != 0
}

// addr is the address at offset off from the network address.
func (a *ipAllocator) addr(off uint32) netip.Addr {
	b := a.prefix.Addr().As16()
	carry := uint64(off)
	for i := len(b) - 1; i >= 0 && carry > 0; i-- {
		sum := uint64(b[i]) + carry&0xff
		b[i] = byte(sum)
		carry = carry>>8 + sum>>8
	}
	addr := netip.AddrFrom16(b)
	if a.prefix.Addr().Is4() {
		return addr.Unmap()
	}
	return addr
}

// offset is the inverse of addr, for an address inside the prefix; ok is
// false when it is outside the usable range.
func (a *ipAllocator) offset(addr netip.Addr) (uint32, bool) {
	x, base := addr.As16(), a.prefix.Addr().As16()
	var off uint64
	for i := range x {
		d := uint64(x[i]) - uint64(base[i]) // host bits only: base has them all zero
		if i < 16-8 {
			if d != 0 {
				return 0, false
			}
			continue
		}
		off = off<<8 | d
	}
	if off == 0 || off >= uint64(a.limit) {
		return 0, false
	}
	return uint32(off), true
}
