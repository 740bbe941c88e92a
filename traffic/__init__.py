"""Emulated RDMA NICs that run LLM-training collectives as RoCEv2 traffic.

Each host of the testbed runs one rank of a job as a process inside its Mininet
host (or namespace)::

    rocelab traffic run   --job job.json --rank N --out report.json   # one per host
    rocelab traffic check --job job.json                             # validate, show schedules
    rocelab traffic pcap  sample.pcap                                # one of every frame we send
    rocelab bench traffic [--quick]                                  # hot path vs Scapy sendp

Ranks coordinate only over the network (a UDP barrier to rank 0 on the job's
``control_port``, DSCP of the control class), every wait is bounded by the
job's ``timeout_s``, and each rank writes a JSON report even on failure or
SIGTERM/Ctrl-C (exit status 0 ok, 1 failed or timed out, 2 bad job or
arguments, 130 interrupted).

Modules and the API other parts call
------------------------------------
``traffic.job``
    ``load_job(path) -> Job``, ``parse_job(dict) -> Job`` (raise ``JobError`` naming the bad key);
    ``place(hosts, nranks=None, mode="topology"|"random", seed=0) -> [host dict]`` orders hosts
    into ranks (topology: ring neighbours share a leaf; host dicts may carry ``leaf``).
    The job format is documented in the module docstring.
``traffic.runner``
    ``RankRunner(job, rank).run() -> report dict`` — what ``rocelab traffic run`` does.
    CTS: a receiver grants each (peer, channel) credit = bytes its host consumed +
    ``cts.buffer_bytes``; senders post WRITEs only within it. With ``cts.budget_bytes`` the
    receiver also bounds its total: credit granted and not yet consumed stays within the
    budget, a chunk at a time to the waiting connections in turn (receiver-driven admission).
    Slicing (job ``slicing: true``, as NCCL pipelines a step in slices): the next phase's sends leave
    chunk by chunk as this phase's data arrives, and a phase needs its data out, not ACKed
    (the last phase waits for its ACKs); otherwise each phase waits for all of it.
``traffic.report``
    ``rank_report(runner)``; ``nccl_table(report) -> str`` (size, count, type, redop, root,
    time, algbw, busbw); ``perftest_table(report) -> str`` (stream pattern).
    Report keys: job, pattern, rank, nranks, host, ip, status ("ok"|"timeout"|"error"|"interrupted"),
    error, config (incl. the effective lat_timeout_s),
    results [{size, count, type, redop, root, time_us, algbw_GBps, busbw_GBps, ...}],
    perftest, bytes {expected_tx, expected_rx, acked_tx, rx}, counters {tx/rx packets and bytes,
    data_tx_bytes, data_rx_bytes, oos, duplicates, cnp_tx, cnp_rx, ce_rx, pfc_rx, pfc_tx,
    retransmits, lat_timeouts, naks_tx/rx, acks_tx/rx, cts_tx/rx, icrc_errors, rx_buffer_peak
    (slow receiver's high-water mark, bytes), ...},
    pfc_rx_by_priority, paused_seconds_by_priority, ack_rtt_us {samples, min, median, max} (a
    message's last packet to its ACK, resends excluded: the RTT through the fabric), timing,
    qps [per-QP counters + dcqcn state].
``traffic.collectives``
    ``PATTERNS`` (ring_allreduce, tree_allreduce, allgather, reducescatter, alltoall, alltoallv, incast,
    pipeline, stream), ``schedule(pattern, rank, n, size, chunk) -> [Phase]``,
    ``peers(...)``, ``expected_bytes(...)``, ``BUSBW_FACTOR`` (nccl-tests' factors).
``traffic.nic``
    ``Nic(iface, mac, ip, NicConfig(...))`` with ``create_qp(local_qpn, remote_qpn, peer_ip,
    peer_mac, context)``, ``post_write(qp, nbytes, imm=None, on_done=None)``, ``poll(max_wait)``,
    ``send_cts(...)``, ``send_pfc({prio: quanta})``, ``report()``; callbacks ``on_rx_bytes``
    (arrived in order), ``on_rx_consumed`` (taken in by the host: at ``slow_rx_bps`` when set),
    ``on_rx_message``, ``on_cts``. ``NicConfig.ack_timeout``: the local ACK timeout in use. ``TrafficClass(dscp, priority, ecn)``; defaults: data DSCP 26
    priority 3 ECT(0), CNP DSCP 48 priority 6, control/CTS DSCP 46 priority 7.
``traffic.dcqcn``
    ``DcqcnParams`` (settable parameters), ``Dcqcn(line_rate_bps, params)`` with ``on_cnp``,
    ``on_sent``, ``tick``, ``stats()``.
``traffic.packets``
    Scapy layers ``RETH``, ``ImmDt``, ``CTS`` (plus scapy.contrib.roce's BTH/AETH/CNP and
    mac_control's PFC) and builders ``roce(...)``, ``write_bth``, ``ack_bth``, ``cnp_bth``,
    ``cts_bth``, ``pfc_frame(src_mac, {prio: quanta})``.
``traffic.icrc``
    ``compute(frame)``, ``trailer_ok(frame)``, ``masked_bytes(frame)`` — the RoCEv2 ICRC.
``traffic.fastpath``
    ``FrameTemplate(frame).render(psn, ip_id, ackreq, va, imm, dma_len)``, ``RawSocket(iface,
    mac)`` (AF_PACKET + BPF: RoCEv2 for our MAC and MAC-control frames), ``PortSink()`` (UDP
    4791 listener so the kernel sends no ICMP port-unreachable).
``traffic.samples``
    ``sample_frames()``, ``write_sample_pcap(path)``: frames exactly as the hot path emits them.
"""
