package mad

import "strconv"

// RejectReason is the 16-bit reason of a REJ (IBTA §12.6, REJ, the
// table of rejection reasons).
type RejectReason uint16

// Rejection reasons.
const (
	RejNoQP                     RejectReason = 1
	RejNoEEC                    RejectReason = 2
	RejNoResources              RejectReason = 3
	RejTimeout                  RejectReason = 4
	RejUnsupported              RejectReason = 5
	RejInvalidCommID            RejectReason = 6
	RejInvalidCommInstance      RejectReason = 7
	RejInvalidServiceID         RejectReason = 8
	RejInvalidTransportType     RejectReason = 9
	RejStaleConnection          RejectReason = 10
	RejRDCNotExist              RejectReason = 11
	RejInvalidGID               RejectReason = 12
	RejInvalidLID               RejectReason = 13
	RejInvalidSL                RejectReason = 14
	RejInvalidTrafficClass      RejectReason = 15
	RejInvalidHopLimit          RejectReason = 16
	RejInvalidPacketRate        RejectReason = 17
	RejInvalidAltGID            RejectReason = 18
	RejInvalidAltLID            RejectReason = 19
	RejInvalidAltSL             RejectReason = 20
	RejInvalidAltTrafficClass   RejectReason = 21
	RejInvalidAltHopLimit       RejectReason = 22
	RejInvalidAltPacketRate     RejectReason = 23
	RejPortCMRedirect           RejectReason = 24
	RejPortRedirect             RejectReason = 25
	RejInvalidMTU               RejectReason = 26
	RejInsufficientRespResource RejectReason = 27
	RejConsumer                 RejectReason = 28
	RejInvalidRNRRetry          RejectReason = 29
	RejDuplicateLocalCommID     RejectReason = 30
	RejUnsupportedClassVersion  RejectReason = 31
	RejInvalidFlowLabel         RejectReason = 32
	RejInvalidAltFlowLabel      RejectReason = 33
	RejVendorOptionUnsupported  RejectReason = 35
)

// ReasonInfo names a rejection reason and says what its additional
// reject information (ARI) holds.
type ReasonInfo struct {
	Name  string // short, for tools: "invalid_service_id"
	Title string // as IBTA words it: "Invalid Service ID"
	ARI   string // what the ARI carries, "" when nothing
}

// rejectReasons is indexed by reason code.
var rejectReasons = [...]ReasonInfo{
	RejNoQP:                     {"no_qp", "No QP available", ""},
	RejNoEEC:                    {"no_eec", "No EEC available", ""},
	RejNoResources:              {"no_resources", "No resources available", ""},
	RejTimeout:                  {"timeout", "Timeout", "the CA GUID of the side that timed out"},
	RejUnsupported:              {"unsupported", "Unsupported request", ""},
	RejInvalidCommID:            {"invalid_comm_id", "Invalid Communication ID", ""},
	RejInvalidCommInstance:      {"invalid_comm_instance", "Invalid Communication Instance", ""},
	RejInvalidServiceID:         {"invalid_service_id", "Invalid Service ID", ""},
	RejInvalidTransportType:     {"invalid_transport_type", "Invalid Transport Service Type", ""},
	RejStaleConnection:          {"stale_connection", "Stale connection", ""},
	RejRDCNotExist:              {"rdc_not_exist", "RDC does not exist", ""},
	RejInvalidGID:               {"invalid_gid", "Primary Remote Port GID rejected", "an acceptable GID"},
	RejInvalidLID:               {"invalid_lid", "Primary Remote Port LID rejected", "an acceptable LID"},
	RejInvalidSL:                {"invalid_sl", "Invalid Primary SL", "an acceptable SL"},
	RejInvalidTrafficClass:      {"invalid_traffic_class", "Invalid Primary Traffic Class", "an acceptable traffic class"},
	RejInvalidHopLimit:          {"invalid_hop_limit", "Invalid Primary Hop Limit", "an acceptable hop limit"},
	RejInvalidPacketRate:        {"invalid_packet_rate", "Invalid Primary Packet Rate", "an acceptable packet rate"},
	RejInvalidAltGID:            {"invalid_alt_gid", "Alternate Remote Port GID rejected", "an acceptable GID"},
	RejInvalidAltLID:            {"invalid_alt_lid", "Alternate Remote Port LID rejected", "an acceptable LID"},
	RejInvalidAltSL:             {"invalid_alt_sl", "Invalid Alternate SL", "an acceptable SL"},
	RejInvalidAltTrafficClass:   {"invalid_alt_traffic_class", "Invalid Alternate Traffic Class", "an acceptable traffic class"},
	RejInvalidAltHopLimit:       {"invalid_alt_hop_limit", "Invalid Alternate Hop Limit", "an acceptable hop limit"},
	RejInvalidAltPacketRate:     {"invalid_alt_packet_rate", "Invalid Alternate Packet Rate", "an acceptable packet rate"},
	RejPortCMRedirect:           {"port_cm_redirect", "Port and CM Redirection", "a ClassPortInfo to retry at"},
	RejPortRedirect:             {"port_redirect", "Port Redirection", "a ClassPortInfo to retry at"},
	RejInvalidMTU:               {"invalid_mtu", "Invalid Path MTU", "an acceptable MTU"},
	RejInsufficientRespResource: {"insufficient_resp_resources", "Insufficient Responder Resources", "the responder resources available"},
	RejConsumer:                 {"consumer_reject", "Consumer Reject", "consumer defined"},
	RejInvalidRNRRetry:          {"invalid_rnr_retry", "Invalid RNR NAK Retry Count", ""},
	RejDuplicateLocalCommID:     {"duplicate_local_comm_id", "Duplicate Local Communication ID", ""},
	RejUnsupportedClassVersion:  {"unsupported_class_version", "Unsupported Class Version", "the highest class version supported"},
	RejInvalidFlowLabel:         {"invalid_flow_label", "Invalid Primary Flow Label", "an acceptable flow label"},
	RejInvalidAltFlowLabel:      {"invalid_alt_flow_label", "Invalid Alternate Flow Label", "an acceptable flow label"},
	RejVendorOptionUnsupported:  {"vendor_option_not_supported", "Vendor Option Not Supported", ""},
}

// Info returns what is known of the reason; Name is "" for a code that
// the table does not hold.
func (r RejectReason) Info() ReasonInfo {
	if int(r) < len(rejectReasons) {
		return rejectReasons[r]
	}
	return ReasonInfo{}
}

// String returns the reason's short name, or "reason_N".
func (r RejectReason) String() string {
	if n := r.Info().Name; n != "" {
		return n
	}
	return "reason_" + strconv.Itoa(int(r))
}
