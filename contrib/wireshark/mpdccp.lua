-- SPDX-License-Identifier: MIT
--
-- mpdccp.lua: MP-DCCP (RFC 9897) over DCCP-UDP (RFC 6773) for Wireshark and
-- tshark 4.x, which know DCCP only as IP protocol 33 and nothing of MP-DCCP.
--
--   tshark -X lua_script:contrib/wireshark/mpdccp.lua -r capture.pcap
--   tshark -i eth0 -X lua_script:contrib/wireshark/mpdccp.lua -Y mpdccp
--
-- Each UDP payload on port 6511 (preference mpdccp.udp_port) is handed to
-- Wireshark's own DCCP dissector, which judges the generic header, the Ack
-- Vectors and the DCCP checksum. This script then
--   * decodes every Multipath option (DCCP option 46) with each RFC 9897
--     sub-option into mpdccp.* fields; unknown and experimental ones
--     (MP_EXP, MP_KEY key type 255) as raw bytes with their type; a
--     malformed one gets expert info (group Malformed, severity Error);
--   * decodes MP_CAPABLE (feature 10) in Change/Confirm options;
--   * checks RFC 6773's rule, which Wireshark's DCCP dissector does not:
--     a DCCP-UDP datagram carries a UDP checksum (never zero) that is right
--     for the outer addresses. The verdict is mpdccp.csum_ok (1 good, 0 bad).
--     Behind a NAT, the DCCP checksum (RFC 4340) is right only for the
--     addresses its sender saw, so Wireshark may call it bad on the other
--     side of the NAT while csum_ok, which NATs keep true, is 1.
--     Captures of outgoing packets taken on a host that offloads checksums
--     to the NIC hold an unfinished UDP checksum; capture on the path.

local mpdccp = Proto("mpdccp", "Multipath DCCP (RFC 9897) over DCCP-UDP (RFC 6773)")

mpdccp.prefs.udp_port = Pref.uint("UDP port", 6511, "UDP port of DCCP-UDP (RFC 6773; IANA: 6511)")
mpdccp.prefs.inner = Pref.bool("Decode inner packets", true,
	"Dissect the payload of Data and DataAck packets as the tunnelled IPv4/IPv6 packet (mptun)")

local subopt_names = {
	[0] = "MP_CONFIRM", [1] = "MP_JOIN", [2] = "MP_FAST_CLOSE", [3] = "MP_KEY",
	[4] = "MP_SEQ", [5] = "MP_HMAC", [6] = "MP_RTT", [7] = "MP_ADDADDR",
	[8] = "MP_REMOVEADDR", [9] = "MP_PRIO", [10] = "MP_CLOSE", [11] = "MP_EXP",
}
local key_types = { [0] = "Plain text", [255] = "Experimental" }
local rtt_types = { [0] = "Raw", [1] = "Min", [2] = "Max", [3] = "Smoothed" }
local feature_opts = { [32] = "Change L", [33] = "Confirm L", [34] = "Change R", [35] = "Confirm R" }

local f = {
	option    = ProtoField.bytes("mpdccp.option", "Multipath option"),
	type      = ProtoField.uint8("mpdccp.type", "Sub-option", base.DEC, subopt_names),
	length    = ProtoField.uint8("mpdccp.length", "Length", base.DEC),
	unknown   = ProtoField.bytes("mpdccp.unknown", "Unknown sub-option data"),
	confirm   = ProtoField.bytes("mpdccp.confirm", "Confirmed options"),
	join_id   = ProtoField.uint8("mpdccp.join.addrid", "Address ID", base.DEC),
	join_ci   = ProtoField.uint32("mpdccp.join.ci", "Peer's Connection Identifier", base.HEX),
	join_nonce = ProtoField.uint32("mpdccp.join.nonce", "Nonce", base.HEX),
	fast_key  = ProtoField.bytes("mpdccp.fastclose.key", "Peer's key data"),
	key_resvd = ProtoField.uint8("mpdccp.key.reserved", "Reserved", base.HEX),
	key_ci    = ProtoField.uint32("mpdccp.key.ci", "Connection Identifier", base.HEX),
	key_type  = ProtoField.uint8("mpdccp.key.type", "Key type", base.DEC, key_types),
	key_data  = ProtoField.bytes("mpdccp.key.data", "Key data"),
	seq       = ProtoField.uint64("mpdccp.seq", "Multipath sequence number", base.DEC),
	hmac      = ProtoField.bytes("mpdccp.hmac", "HMAC (first 20 bytes of HMAC-SHA256)"),
	rtt_type  = ProtoField.uint8("mpdccp.rtt.type", "RTT type", base.DEC, rtt_types),
	rtt       = ProtoField.uint32("mpdccp.rtt.value", "RTT (ms)", base.DEC),
	rtt_age   = ProtoField.uint32("mpdccp.rtt.age", "Age (ms)", base.DEC),
	add_id    = ProtoField.uint8("mpdccp.addaddr.addrid", "Address ID", base.DEC),
	add_nonce = ProtoField.uint32("mpdccp.addaddr.nonce", "Nonce", base.HEX),
	add_v4    = ProtoField.ipv4("mpdccp.addaddr.ipv4", "Address"),
	add_v6    = ProtoField.ipv6("mpdccp.addaddr.ipv6", "Address"),
	add_port  = ProtoField.uint16("mpdccp.addaddr.port", "Port (0: the same port)", base.DEC),
	rm_id     = ProtoField.uint8("mpdccp.removeaddr.addrid", "Address ID", base.DEC),
	rm_nonce  = ProtoField.uint32("mpdccp.removeaddr.nonce", "Nonce", base.HEX),
	prio      = ProtoField.uint8("mpdccp.prio", "Priority", base.DEC, nil, 0x0f),
	prio_resvd = ProtoField.uint8("mpdccp.prio.reserved", "Reserved", base.HEX, nil, 0xf0),
	close_key = ProtoField.bytes("mpdccp.close.key", "Peer's key data"),
	exp       = ProtoField.bytes("mpdccp.exp.data", "Experimental data"),
	capable   = ProtoField.uint8("mpdccp.capable.version", "MP_CAPABLE version", base.DEC),
	capable_opt = ProtoField.uint8("mpdccp.capable.option", "MP_CAPABLE in", base.DEC, feature_opts),
	csum_ok   = ProtoField.uint8("mpdccp.csum_ok", "RFC 6773 checksum good", base.DEC, { [0] = "bad", [1] = "good" }),
	udp_csum  = ProtoField.uint16("mpdccp.udp_checksum_computed", "UDP checksum computed", base.HEX),
}
mpdccp.fields = f

local e_malformed = ProtoExpert.new("mpdccp.malformed", "Malformed Multipath option",
	expert.group.MALFORMED, expert.severity.ERROR)
local e_unknown = ProtoExpert.new("mpdccp.unknown_type", "Unknown Multipath sub-option",
	expert.group.UNDECODED, expert.severity.NOTE)
local e_csum = ProtoExpert.new("mpdccp.bad_checksum", "DCCP-UDP checksum bad or absent (RFC 6773)",
	expert.group.CHECKSUM, expert.severity.ERROR)
mpdccp.experts = { e_malformed, e_unknown, e_csum }

-- Wireshark 4.0 registers its DCCP dissector only as IP protocol 33.
local dccp = DissectorTable.get("ip.proto"):get_dissector(33)

local ip_src, ip_dst = Field.new("ip.src"), Field.new("ip.dst")
local ip6_src, ip6_dst = Field.new("ipv6.src"), Field.new("ipv6.dst")
local udp_sport, udp_dport = Field.new("udp.srcport"), Field.new("udp.dstport")
local udp_len, udp_csum = Field.new("udp.length"), Field.new("udp.checksum")

-- last returns the innermost value of a field (ICMP errors quote packets).
local function last(field)
	local all = { field() }
	return all[#all]
end

-- sum16 adds the bytes of a string as big-endian 16-bit words, eight
-- bytes per string.byte call (a call per byte is several times slower).
local function sum16(s, acc)
	local n = #s
	local i = 1
	while i + 7 <= n do
		local a, b, c, d, e, f2, g, h = s:byte(i, i + 7)
		acc = acc + (a + c + e + g) * 256 + b + d + f2 + h
		i = i + 8
	end
	while i + 1 <= n do
		local a, b = s:byte(i, i + 1)
		acc = acc + a * 256 + b
		i = i + 2
	end
	if i == n then
		acc = acc + s:byte(i) * 256
	end
	return acc
end

local function fold(acc)
	while acc > 0xffff do
		acc = (acc % 0x10000) + math.floor(acc / 0x10000)
	end
	return acc
end

-- check_udp_checksum verifies RFC 6773's rule for the datagram whose payload
-- is tvb; nil when it cannot be judged (truncated capture, no IP header).
local function check_udp_checksum(tvb)
	if tvb:len() < tvb:reported_len() then
		return nil
	end
	local src, dst = last(ip_src), last(ip_dst)
	local s6, d6 = last(ip6_src), last(ip6_dst)
	if not src and s6 then
		src, dst = s6, d6
	end
	local sport, dport, ulen, csum = last(udp_sport), last(udp_dport), last(udp_len), last(udp_csum)
	if not (src and dst and sport and dport and ulen and csum) then
		return nil
	end
	if ulen.value ~= tvb:len() + 8 then
		return nil
	end
	local acc = sum16(src.range:raw(), 0)
	acc = sum16(dst.range:raw(), acc)
	acc = acc + 17 + ulen.value -- pseudo-header: protocol and UDP length
	acc = acc + sport.value + dport.value + ulen.value + csum.value
	acc = sum16(tvb:raw(), acc)
	local computed = 0xffff - fold(acc - csum.value)
	if computed == 0 then
		computed = 0xffff
	end
	return csum.value ~= 0 and fold(acc) == 0xffff, computed
end

-- dccp_options_range returns the offset and length of the options area,
-- or nil if the header cannot hold options (Wireshark's DCCP dissector
-- reports what is wrong with it).
local function dccp_options_range(tvb)
	if tvb:len() < 12 then
		return nil
	end
	local doff = tvb(4, 1):uint() * 4
	local b8 = tvb(8, 1):uint()
	local x = b8 % 2
	local typ = math.floor(b8 / 2) % 16
	local hl = 12
	if x == 1 then
		hl = 16
	end
	if typ == 0 or typ == 10 then -- Request, Listen: Service Code
		hl = hl + 4
	elseif typ == 1 or typ == 7 then -- Response, Reset: Ack + Service Code / Reset Code
		hl = hl + 12
	elseif typ == 3 or typ == 4 then -- Ack, DataAck
		hl = hl + (x == 1 and 8 or 4)
	elseif typ >= 5 and typ <= 9 then -- CloseReq, Close, Sync, SyncAck
		hl = hl + 8
	elseif typ ~= 2 then
		return nil
	end
	if doff < hl or doff > tvb:len() then
		return nil
	end
	return hl, doff - hl
end

local decode_mp -- forward

-- decode_confirm decodes the options an MP_CONFIRM lists.
local function decode_confirm(tvb, tree, pinfo, off, len, depth)
	local item = tree:add(f.confirm, tvb(off, len))
	local o, stop = off, off + len
	while o < stop do
		if stop - o < 3 or tvb(o, 1):uint() ~= 46 then
			item:add_proto_expert_info(e_malformed, "MP_CONFIRM entry is not a Multipath option")
			return
		end
		local l = tvb(o + 1, 1):uint()
		if l < 3 or o + l > stop then
			item:add_proto_expert_info(e_malformed, "MP_CONFIRM entry of bad length " .. l)
			return
		end
		decode_mp(tvb, item, pinfo, o, l, depth + 1)
		o = o + l
	end
end

local function need(item, ok, name, len)
	if not ok then
		item:add_proto_expert_info(e_malformed, name .. " with a value of " .. len .. " bytes")
	end
	return ok
end

-- decode_mp decodes one Multipath option (46, Length, MP_OPT, value) at off.
decode_mp = function(tvb, tree, pinfo, off, len, depth)
	local item = tree:add(f.option, tvb(off, len))
	local t = tvb(off + 2, 1):uint()
	local name = subopt_names[t] or ("unknown " .. t)
	item:set_text("Multipath option: " .. name .. " (" .. len .. " bytes)")
	item:add(f.type, tvb(off + 2, 1))
	item:add(f.length, tvb(off + 1, 1))
	local v, vl = off + 3, len - 3
	if t == 0 then
		if depth > 0 then
			item:add_proto_expert_info(e_malformed, "MP_CONFIRM inside MP_CONFIRM")
		elseif vl > 0 then
			decode_confirm(tvb, item, pinfo, v, vl, depth)
		end
	elseif t == 1 then
		if need(item, vl == 9, name, vl) then
			item:add(f.join_id, tvb(v, 1))
			item:add(f.join_ci, tvb(v + 1, 4))
			item:add(f.join_nonce, tvb(v + 5, 4))
		end
	elseif t == 2 or t == 10 then
		if need(item, vl >= 1, name, vl) then
			item:add(t == 2 and f.fast_key or f.close_key, tvb(v, vl))
		end
	elseif t == 3 then
		if need(item, vl >= 6, name, vl) then
			item:add(f.key_resvd, tvb(v, 1))
			item:add(f.key_ci, tvb(v + 1, 4))
			local o, stop = v + 5, v + vl
			while o < stop do
				local kt = tvb(o, 1):uint()
				local kl = stop - o - 1 -- unknown types: the rest, raw
				if kt == 0 then
					kl = 8
				elseif kt == 255 then
					kl = 64
				end
				if o + 1 + kl > stop or kl <= 0 then
					item:add_proto_expert_info(e_malformed, "MP_KEY key of type " .. kt .. " truncated")
					break
				end
				local k = item:add(f.key_type, tvb(o, 1))
				k:add(f.key_data, tvb(o + 1, kl))
				o = o + 1 + kl
			end
		end
	elseif t == 4 then
		if need(item, vl == 6, name, vl) then
			item:add(f.seq, tvb(v, 6), tvb(v, 6):uint64())
		end
	elseif t == 5 then
		if need(item, vl == 20, name, vl) then
			item:add(f.hmac, tvb(v, 20))
		end
	elseif t == 6 then
		if need(item, vl == 9, name, vl) then
			item:add(f.rtt_type, tvb(v, 1))
			item:add(f.rtt, tvb(v + 1, 4))
			item:add(f.rtt_age, tvb(v + 5, 4))
		end
	elseif t == 7 then
		local al = vl - 5
		if need(item, al == 4 or al == 6 or al == 16 or al == 18, name, vl) then
			item:add(f.add_id, tvb(v, 1))
			item:add(f.add_nonce, tvb(v + 1, 4))
			if al == 4 or al == 6 then
				item:add(f.add_v4, tvb(v + 5, 4))
			else
				item:add(f.add_v6, tvb(v + 5, 16))
			end
			if al == 6 or al == 18 then
				item:add(f.add_port, tvb(v + vl - 2, 2))
			end
		end
	elseif t == 8 then
		if need(item, vl == 5, name, vl) then
			item:add(f.rm_id, tvb(v, 1))
			item:add(f.rm_nonce, tvb(v + 1, 4))
		end
	elseif t == 9 then
		if need(item, vl == 1, name, vl) then
			item:add(f.prio_resvd, tvb(v, 1))
			item:add(f.prio, tvb(v, 1))
		end
	elseif t == 11 then
		if vl > 0 then
			item:add(f.exp, tvb(v, vl))
		end
	else
		item:add_proto_expert_info(e_unknown, "Unknown Multipath sub-option " .. t)
		if vl > 0 then
			item:add(f.unknown, tvb(v, vl))
		end
	end
	return t
end

-- decode_options walks the DCCP options, decoding Multipath options and
-- MP_CAPABLE; it returns the sub-option types seen, for the Info column.
local function decode_options(tvb, tree, pinfo, off, len)
	local seen = {}
	local o, stop = off, off + len
	while o < stop do
		local typ = tvb(o, 1):uint()
		if typ < 32 then
			o = o + 1
		else
			if o + 1 >= stop then
				return seen -- Wireshark's DCCP dissector flags it
			end
			local l = tvb(o + 1, 1):uint()
			if l < 2 or o + l > stop then
				return seen
			end
			if typ == 46 then
				if l < 3 then
					tree:add_proto_expert_info(e_malformed, "Multipath option without a sub-option type")
				else
					seen[#seen + 1] = subopt_names[decode_mp(tvb, tree, pinfo, o, l, 0)] or "?"
				end
			elseif typ >= 32 and typ <= 35 and l >= 3 and tvb(o + 2, 1):uint() == 10 then
				local c = tree:add(f.capable_opt, tvb(o, 1))
				c:set_text("MP_CAPABLE in " .. feature_opts[typ])
				for i = o + 3, o + l - 1 do
					c:add(f.capable, tvb(i, 1), math.floor(tvb(i, 1):uint() / 16))
				end
			end
			o = o + l
		end
	end
	return seen
end

function mpdccp.dissector(tvb, pinfo, tree)
	-- The outer addresses, before the DCCP payload adds the inner packet's.
	local ok, computed = check_udp_checksum(tvb)
	local dccp_ok = pcall(dccp.call, dccp, tvb, pinfo, tree)
	local sub = tree:add(mpdccp, tvb())
	if not dccp_ok then
		-- Wireshark's DCCP dissector threw (a truncated or malformed header).
		sub:add_proto_expert_info(e_malformed, "DCCP dissector failed: malformed DCCP packet")
	end
	if ok ~= nil then
		local c = sub:add(f.csum_ok, ok and 1 or 0)
		c:set_generated()
		sub:add(f.udp_csum, computed):set_generated()
		if not ok then
			c:add_proto_expert_info(e_csum)
		end
	end
	local off, len = dccp_options_range(tvb)
	if off then
		local seen = decode_options(tvb, sub, pinfo, off, len)
		if #seen > 0 then
			pinfo.cols.info:append(" MP[" .. table.concat(seen, ",") .. "]")
		end
	end
	pinfo.cols.protocol:set("MP-DCCP")
	return tvb:len()
end

-- inner hands a Data payload, a tunnelled IP packet, to the IPv4 or IPv6
-- dissector by its version nibble.
local inner = Proto("mpdccp_inner", "MP-DCCP tunnelled packet")
local ipv4, ipv6 = Dissector.get("ip"), Dissector.get("ipv6")
local data = Dissector.get("data")

function inner.dissector(tvb, pinfo, tree)
	local v = tvb:len() > 0 and math.floor(tvb(0, 1):uint() / 16) or 0
	if v == 4 then
		return ipv4:call(tvb, pinfo, tree)
	elseif v == 6 then
		return ipv6:call(tvb, pinfo, tree)
	end
	return data:call(tvb, pinfo, tree)
end

local registered, inner_registered
local function register()
	local udp, dccp_ports = DissectorTable.get("udp.port"), DissectorTable.get("dccp.port")
	if registered then
		udp:remove(registered, mpdccp)
	end
	if inner_registered then
		dccp_ports:remove(inner_registered, inner)
		inner_registered = nil
	end
	registered = mpdccp.prefs.udp_port
	udp:add(registered, mpdccp)
	if mpdccp.prefs.inner then
		-- mptun's DCCP destination port is the server's UDP port.
		inner_registered = registered
		dccp_ports:add(inner_registered, inner)
	end
end
mpdccp.prefs_changed = register
register()
