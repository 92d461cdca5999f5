package sim

import "testing"

func TestIPAllocator(t *testing.T) {
	tests := []struct {
		cidr      string
		wantFirst []string
		capacity  uint32 // usable addresses
	}{
		{cidr: "10.0.0.0/30", wantFirst: []string{"10.0.0.1", "10.0.0.2"}, capacity: 2},
		{cidr: "10.0.0.7/29", wantFirst: []string{"10.0.0.1", "10.0.0.2"}, capacity: 6},
		{cidr: "10.1.0.0/16", wantFirst: []string{"10.1.0.1", "10.1.0.2"}, capacity: 65534},
		{cidr: "10.0.0.0/8", wantFirst: []string{"10.0.0.1"}, capacity: 65535},
		{cidr: "fd00::/120", wantFirst: []string{"fd00::1", "fd00::2"}, capacity: 254},
		{cidr: "fd00:1::/64", wantFirst: []string{"fd00:1::1"}, capacity: 65535},
	}
	for _, tt := range tests {
		t.Run(tt.cidr, func(t *testing.T) {
			a, err := newIPAllocator(tt.cidr)
			if err != nil {
				t.Fatal(err)
			}
			var offs []uint32
			for i := range tt.capacity {
				off, ip, err := a.allocate()
				if err != nil {
					t.Fatalf("allocate #%d: %v", i, err)
				}
				if int(i) < len(tt.wantFirst) && ip.String() != tt.wantFirst[i] {
					t.Errorf("allocation #%d = %s, want %s", i, ip, tt.wantFirst[i])
				}
				if !a.prefix.Contains(ip) {
					t.Fatalf("allocated %s outside %s", ip, a.prefix)
				}
				if back, ok := a.offset(ip); !ok || back != off {
					t.Fatalf("offset(%s) = %d, %v; want %d", ip, back, ok, off)
				}
				offs = append(offs, off)
			}
			if _, ip, err := a.allocate(); err == nil {
				t.Fatalf("allocated %s beyond the capacity", ip)
			}
			if words := len(a.used); words > 65536/64 {
				t.Errorf("bitmap has %d words", words)
			}
			// A freed address is the next one handed out.
			a.release(offs[len(offs)/2])
			if off, _, err := a.allocate(); err != nil || off != offs[len(offs)/2] {
				t.Errorf("after release: got %d, %v; want %d", off, err, offs[len(offs)/2])
			}
		})
	}
}

func TestIPAllocatorReserve(t *testing.T) {
	a, err := newIPAllocator("10.0.0.0/24")
	if err != nil {
		t.Fatal(err)
	}
	for _, tt := range []struct {
		ip   string
		want uint32
	}{
		{"10.0.0.200", 200},
		{"10.0.0.200", 0}, // taken
		{"10.0.0.0", 0},   // network
		{"10.0.0.255", 0}, // broadcast
		{"10.0.1.1", 0},   // outside
		{"fd00::1", 0},
		{"garbage", 0},
	} {
		if got := a.reserve(tt.ip); got != tt.want {
			t.Errorf("reserve(%s) = %d, want %d", tt.ip, got, tt.want)
		}
	}
	for i := 1; i < 255; i++ {
		_, ip, err := a.allocate()
		if i == 254 {
			if err == nil {
				t.Errorf("allocated %s though the range is full", ip)
			}
			break
		}
		if err != nil || ip.String() == "10.0.0.200" {
			t.Fatalf("allocate #%d = %s, %v", i, ip, err)
		}
	}
}
