package proto

// Stat is the JSON body of the Stat response (SPEC.md).
type Stat struct {
	Device   DeviceStat    `json:"device"`
	Sessions []SessionStat `json:"sessions"`
	QPs      []QPStat      `json:"qps"`
}

// DeviceStat is the device and its counters.
type DeviceStat struct {
	Name     string            `json:"name"`
	Netdev   string            `json:"netdev"`
	Uptime   float64           `json:"uptime_seconds"`
	Counters map[string]uint64 `json:"counters"`
	// CM counts what the device's RDMA CM agent did (cm_* names).
	CM map[string]uint64 `json:"cm,omitempty"`
}

// SessionStat is one client.
type SessionStat struct {
	ID      uint32         `json:"id"`
	PID     int32          `json:"pid"`
	UID     uint32         `json:"uid"`
	Comm    string         `json:"comm"`
	Objects map[string]int `json:"objects"`
	MRBytes int64          `json:"mr_bytes"`
}

// QPStat is one QP, as `rdma resource show qp` shows it, with its
// counters.
type QPStat struct {
	QPN     uint32 `json:"qpn"`
	Session uint32 `json:"session"`
	PID     int32  `json:"pid"`
	Type    string `json:"type"`
	State   string `json:"state"`
	SQPSN   uint32 `json:"sq_psn"`
	RQPSN   uint32 `json:"rq_psn"`
	DestQPN uint32 `json:"dest_qpn"`
	// Rate is the QP's DCQCN rate (bit/s) while a CNP holds it below
	// the line rate; 0 when it is not limited.
	Rate     uint64            `json:"rate,omitempty"`
	Counters map[string]uint64 `json:"counters"`
}
