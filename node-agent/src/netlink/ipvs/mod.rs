//! IPVS over generic netlink: a small client for the kernel's `IPVS` family (what `ipvsadm`
//! speaks), covering virtual servers, real servers, flush and timeouts.

mod msg;

use std::net::IpAddr;

use netlink_sys::{Socket, constants::NETLINK_GENERIC};
use tideway_core::net::Protocol;
use tideway_core::program::VirtualServer;

use crate::dataplane::backend::{DataplaneError, NetlinkError, Refusal};
use msg::{Attrs, Reply, cmd};

pub(crate) use msg::{DestEntry, ServiceEntry};

/// An open IPVS netlink connection.
pub(crate) struct IpvsNetlink {
    socket: Socket,
    family: u16,
    seq: u32,
}

impl IpvsNetlink {
    /// Connects and resolves the IPVS family; fails when the `ip_vs` module is not loaded.
    pub(crate) fn open() -> Result<Self, DataplaneError> {
        let socket = super::netlink_socket(NETLINK_GENERIC, 8 << 20)?;
        let mut nl = IpvsNetlink { socket, family: msg::GENL_ID_CTRL, seq: 0 };
        let attrs = Attrs::default().string(msg::CTRL_ATTR_FAMILY_NAME, "IPVS");
        let what = "resolving the IPVS family (is the ip_vs module loaded?)";
        let replies = nl.request(what, msg::CTRL_CMD_GETFAMILY, 1, attrs, false)?;
        nl.family = replies.iter().find_map(|p| msg::decode_family_id(p)).ok_or_else(|| {
            DataplaneError::from(NetlinkError::Protocol("no IPVS family id in the controller's reply".into()))
        })?;
        Ok(nl)
    }

    /// Sends one request and collects the payloads of its replies.
    fn request(
        &mut self,
        what: &str,
        command: u8,
        version: u8,
        attrs: Attrs,
        dump: bool,
    ) -> Result<Vec<Vec<u8>>, DataplaneError> {
        self.seq = self.seq.wrapping_add(1);
        let flags = msg::NLM_F_REQUEST | if dump { msg::NLM_F_DUMP } else { msg::NLM_F_ACK };
        let m = msg::message(self.family, flags, self.seq, command, version, &attrs);
        self.socket.send(&m, 0).map_err(NetlinkError::socket("sending an IPVS request"))?;
        let mut payloads = Vec::new();
        loop {
            let (buf, _) =
                self.socket.recv_from_full().map_err(NetlinkError::socket("receiving IPVS replies"))?;
            for reply in msg::replies(&buf).map_err(NetlinkError::Protocol)? {
                match reply {
                    Reply::Data(p) => payloads.push(p.to_vec()),
                    Reply::Done => return Ok(payloads),
                    Reply::Error(0) if !dump => return Ok(payloads),
                    Reply::Error(0) => {}
                    Reply::Error(e) => {
                        let refusal = Refusal { what: what.to_string(), errno: -e, message: None };
                        return Err(NetlinkError::Refused(vec![refusal]).into());
                    }
                }
            }
        }
    }

    fn ipvs(&mut self, command: u8, attrs: Attrs, dump: bool) -> Result<Vec<Vec<u8>>, DataplaneError> {
        self.request(&format!("IPVS command {command}"), command, msg::IPVS_GENL_VERSION, attrs, dump)
    }

    /// Every virtual server.
    pub(crate) fn services(&mut self) -> Result<Vec<ServiceEntry>, DataplaneError> {
        let payloads = self.ipvs(cmd::GET_SERVICE, Attrs::default(), true)?;
        Ok(payloads.iter().filter_map(|p| msg::decode_service(p)).collect())
    }

    /// Real servers of one virtual server.
    pub(crate) fn dests(
        &mut self,
        ip: &IpAddr,
        protocol: Protocol,
        port: u16,
    ) -> Result<Vec<DestEntry>, DataplaneError> {
        let attrs = Attrs::default().nested(msg::ATTR_SERVICE, msg::service_key(ip, protocol.number(), port));
        let payloads = self.ipvs(cmd::GET_DEST, attrs, true)?;
        Ok(payloads.iter().filter_map(|p| msg::decode_dest(p, msg::family_of(ip))).collect())
    }

    fn service_attrs(
        ip: &IpAddr,
        protocol: Protocol,
        port: u16,
        scheduler: &str,
        persistence: Option<u32>,
    ) -> Attrs {
        let mut flags = if scheduler == "mh" { msg::F_SCHED1 } else { 0 };
        if persistence.is_some() {
            flags |= msg::F_PERSISTENT;
        }
        let full = msg::service_full(ip, protocol.number(), port, scheduler, flags, persistence.unwrap_or(0));
        Attrs::default().nested(msg::ATTR_SERVICE, full)
    }

    /// Creates the virtual server `vs` (`create`), or changes its scheduler or persistence in
    /// place.
    pub(crate) fn put_service(&mut self, create: bool, vs: &VirtualServer) -> Result<(), DataplaneError> {
        let attrs = Self::service_attrs(&vs.ip, vs.protocol, vs.port, vs.scheduler.as_str(), vs.persistence);
        let cmd = if create { cmd::NEW_SERVICE } else { cmd::SET_SERVICE };
        self.ipvs(cmd, attrs, false).map(|_| ())
    }

    /// Deletes a virtual server with its real servers.
    pub(crate) fn del_service(
        &mut self,
        ip: &IpAddr,
        protocol: Protocol,
        port: u16,
    ) -> Result<(), DataplaneError> {
        let attrs = Attrs::default().nested(msg::ATTR_SERVICE, msg::service_key(ip, protocol.number(), port));
        self.ipvs(cmd::DEL_SERVICE, attrs, false).map(|_| ())
    }

    fn dest_request(
        &mut self,
        command: u8,
        svc: (&IpAddr, Protocol, u16),
        dest: Attrs,
    ) -> Result<(), DataplaneError> {
        let attrs = Attrs::default()
            .nested(msg::ATTR_SERVICE, msg::service_key(svc.0, svc.1.number(), svc.2))
            .nested(msg::ATTR_DEST, dest);
        self.ipvs(command, attrs, false).map(|_| ())
    }

    /// Adds a real server (NAT).
    pub(crate) fn add_dest(
        &mut self,
        svc: (&IpAddr, Protocol, u16),
        ip: &IpAddr,
        port: u16,
        weight: u32,
    ) -> Result<(), DataplaneError> {
        self.dest_request(cmd::NEW_DEST, svc, msg::dest_full(ip, port, weight))
    }

    /// Changes a real server's weight (0 drains it).
    pub(crate) fn set_dest(
        &mut self,
        svc: (&IpAddr, Protocol, u16),
        ip: &IpAddr,
        port: u16,
        weight: u32,
    ) -> Result<(), DataplaneError> {
        self.dest_request(cmd::SET_DEST, svc, msg::dest_full(ip, port, weight))
    }

    /// Removes a real server.
    pub(crate) fn del_dest(
        &mut self,
        svc: (&IpAddr, Protocol, u16),
        ip: &IpAddr,
        port: u16,
    ) -> Result<(), DataplaneError> {
        self.dest_request(cmd::DEL_DEST, svc, msg::dest_key(ip, port))
    }

    /// Deletes every virtual server.
    pub(crate) fn flush(&mut self) -> Result<(), DataplaneError> {
        self.ipvs(cmd::FLUSH, Attrs::default(), false).map(|_| ())
    }

    /// Sets the IPVS connection timeouts (0 keeps the kernel's value).
    pub(crate) fn set_timeouts(&mut self, tcp: u32, tcp_fin: u32, udp: u32) -> Result<(), DataplaneError> {
        let attrs = Attrs::default()
            .u32(msg::ATTR_TIMEOUT_TCP, tcp)
            .u32(msg::ATTR_TIMEOUT_TCP_FIN, tcp_fin)
            .u32(msg::ATTR_TIMEOUT_UDP, udp);
        self.ipvs(cmd::SET_CONFIG, attrs, false).map(|_| ())
    }
}
