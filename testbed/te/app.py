"""The Ryu app: a :class:`TEService` behind a WSGI REST API, re-optimized on a timer.

Loaded by ryu-manager through :mod:`testbed.te.launcher`, which passes the settings in
the ``ROCELAB_TE_CONFIG`` environment variable (JSON: fabric, programmer, interval_s,
min_rate_mbps, watch_operstate, intf_format) because ryu-manager's own command line belongs to
oslo.config. All REST handlers and the timer run in eventlet green threads; anything
that talks gRPC goes to the worker process (:mod:`testbed.te.worker`).

REST (JSON in and out, errors as ``{"error": "..."}`` with 400/404/502):

=======  ===================================  ==========================================
GET      /te                                  status: interval, last run, events
GET      /te/topology                         switches, hosts, links with up/down state
POST     /te/links/{switch}/{port}/{up|down}  a link event (the testbed tells the app)
POST     /te/switches/{switch}/{up|down}      a switch event
GET      /te/switches                         P4Runtime Capabilities of every switch
GET      /te/placements                       installed overrides (cspf/manual), their paths
GET      /te/utilization                      per directed link: planned and measured
POST     /te/overrides                        {leaf, ingress_port, dst_prefix, egress_port}
DELETE   /te/overrides                        {leaf, ingress_port, dst_prefix} (body or query)
GET      /te/demands                          the traffic matrix the next run would use
POST     /te/demands                          a hint {leaf, ingress_port, dst_prefix, rate_mbps[, ttl_s]}
DELETE   /te/demands                          {leaf, ingress_port, dst_prefix}
POST     /te/optimize                         run CSPF now; returns the run's summary
GET/PUT  /te/interval                         {"interval_s": seconds}
=======  ===================================  ==========================================
"""
import json
import logging
import os

from ryu.app.wsgi import ControllerBase, Response, WSGIApplication, route
from ryu.base import app_manager
from ryu.lib import hub

from testbed.clos import Clos
from testbed.te import fields
from testbed.te.worker import RemoteError, WorkerError
from testbed.te.programmer import ProgrammerError, make_programmer
from testbed.te.service import TEService
from testbed.te.topology import FabricError

LOG = logging.getLogger("testbed.te.app")
CONFIG_ENV = "ROCELAB_TE_CONFIG"
SERVICE_KEY = "te_service"


class UserError(Exception):
    pass


def load_config():
    raw = os.environ.get(CONFIG_ENV)
    if not raw:
        raise UserError(f"{CONFIG_ENV} is not set: start the app with `rocelab te run --fabric ...`")
    config = json.loads(raw)
    config.setdefault("programmer", "dry-run")
    config.setdefault("interval_s", 5.0)
    config.setdefault("min_rate_mbps", 0.01)
    config.setdefault("watch_operstate", True)
    return config


class TrafficEngineeringApp(app_manager.RyuApp):
    _CONTEXTS = {"wsgi": WSGIApplication}

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        config = load_config()
        clos = Clos.load(config["fabric"])
        self.service = TEService(clos, make_programmer(config["programmer"], clos),
                                 interval_s=config["interval_s"], min_rate_mbps=config["min_rate_mbps"],
                                 lock=hub.Semaphore(1), watch_operstate=config["watch_operstate"],
                                 intf_format=config.get("intf_format"))
        kwargs["wsgi"].register(TERestController, {SERVICE_KEY: self.service})
        self._timer = None
        self.logger.info("TE app: %d switches, programmer %s, interval %.1f s",
                         len(clos.switches), config["programmer"], self.service.interval_s)

    def start(self):
        thread = super().start()
        self._timer = hub.spawn(self._loop)
        return thread

    def stop(self):
        if self._timer is not None:
            hub.kill(self._timer)
        self.service.close()
        super().stop()

    def _loop(self):
        while True:
            try:
                result = self.service.tick()
                if result and (result["installed"] or result["removed"] or result["errors"]):
                    self.logger.info("TE run %d: +%d -%d overrides, max planned utilization %.3f%s",
                                     result["run"], len(result["installed"]), len(result["removed"]),
                                     result["max_utilization_planned"],
                                     f", errors: {result['errors']}" if result["errors"] else "")
            except Exception:  # the loop must survive a bad run; the traceback goes to the log
                self.logger.exception("TE periodic run failed")
            hub.sleep(min(0.5, self.service.interval_s / 2))


def _json(data, status=200):
    try:
        text = fields.dumps(data)
    except ValueError as exc:  # a NaN or Infinity that got into state: a bug, never invalid JSON
        LOG.error("TE REST: unserializable response: %s", exc)
        status, text = 500, fields.dumps({"error": "internal error: the answer held a non-finite number"})
    return Response(status=status, content_type="application/json", charset="utf-8", body=(text + "\n").encode())


def _handled(fn):
    """Map user errors to 400 and switch/worker failures to 502, never a traceback: anything
    else is a 500 with a JSON error (the traceback goes to the app's log only)."""
    def wrapper(self, req, **kwargs):
        try:
            return fn(self, req, **kwargs)
        except (FabricError, UserError) as exc:
            return _json({"error": str(exc)}, 400)
        except (ProgrammerError, WorkerError, RemoteError) as exc:
            return _json({"error": str(exc)}, 502)
        except Exception as exc:
            LOG.exception("TE REST %s %s failed", req.method, req.path)
            return _json({"error": f"internal error ({type(exc).__name__}); see the TE app's log"}, 500)
    wrapper.__name__ = fn.__name__
    wrapper.__doc__ = fn.__doc__
    return wrapper


def _body(req, required, optional=()):
    """The request's JSON object (or, for DELETE, its query string) with `required` keys."""
    length = req.content_length
    if length is not None and length > fields.MAX_BODY_BYTES:
        raise UserError(f"request body: {length} bytes is more than {fields.MAX_BODY_BYTES}")
    data = fields.parse_body(req.body)
    for key, value in req.GET.items():
        data.setdefault(key, value)
    missing = [k for k in required if k not in data]
    if missing:
        raise UserError(f"missing field(s): {', '.join(missing)} (need {', '.join(required)})")
    unknown = sorted(set(data) - set(required) - set(optional))
    if unknown:
        raise UserError(f"unknown field(s): {', '.join(k if len(k) <= 40 else k[:40] + '...' for k in unknown[:5])} "
                        f"(allowed: {', '.join(list(required) + list(optional))})")
    return data


KEY_FIELDS = ("leaf", "ingress_port", "dst_prefix")
STATE = {"state": "up|down"}


class TERestController(ControllerBase):
    def __init__(self, req, link, data, **config):
        super().__init__(req, link, data, **config)
        self.service = data[SERVICE_KEY]

    @route("te", "/te", methods=["GET"])
    @_handled
    def status(self, req, **_):
        return _json(self.service.status())

    @route("te", "/te/topology", methods=["GET"])
    @_handled
    def topology(self, req, **_):
        return _json(self.service.graph.describe())

    @route("te", "/te/links/{switch}/{port}/{state}", methods=["POST"], requirements=STATE)
    @_handled
    def link_event(self, req, switch, port, state, **_):
        return _json(self.service.link_event(switch, fields.port(port, "port"), state == "up"))

    @route("te", "/te/switches/{switch}/{state}", methods=["POST"], requirements=STATE)
    @_handled
    def switch_event(self, req, switch, state, **_):
        return _json(self.service.switch_event(switch, state == "up"))

    @route("te", "/te/switches", methods=["GET"])
    @_handled
    def switches(self, req, **_):
        names = req.GET.getall("switch") or None
        timeout = req.GET.get("timeout", 2.0)
        return _json(self.service.probe_switches(names, timeout))

    @route("te", "/te/placements", methods=["GET"])
    @_handled
    def placements(self, req, **_):
        return _json(self.service.placements())

    @route("te", "/te/utilization", methods=["GET"])
    @_handled
    def utilization(self, req, **_):
        return _json(self.service.utilization())

    @route("te", "/te/overrides", methods=["GET"])
    @_handled
    def overrides(self, req, **_):
        return _json(self.service.placements())

    @route("te", "/te/overrides", methods=["POST"])
    @_handled
    def add_override(self, req, **_):
        d = _body(req, KEY_FIELDS + ("egress_port",))
        return _json(self.service.add_manual(d["leaf"], d["ingress_port"], d["dst_prefix"], d["egress_port"]), 201)

    @route("te", "/te/overrides", methods=["DELETE"])
    @_handled
    def remove_override(self, req, **_):
        d = _body(req, KEY_FIELDS)
        return _json(self.service.remove_override(d["leaf"], d["ingress_port"], d["dst_prefix"]))

    @route("te", "/te/demands", methods=["GET"])
    @_handled
    def demands(self, req, **_):
        return _json({"demands": [dict(d.key.as_dict(), rate_mbps=round(d.rate_mbps, 6), dst_leaf=d.dst_leaf)
                                  for d in self.service.demands()]})

    @route("te", "/te/demands", methods=["POST"])
    @_handled
    def add_demand(self, req, **_):
        d = _body(req, KEY_FIELDS + ("rate_mbps",), ("ttl_s",))
        return _json(self.service.add_hint(d["leaf"], d["ingress_port"], d["dst_prefix"], d["rate_mbps"],
                                           d.get("ttl_s")), 201)

    @route("te", "/te/demands", methods=["DELETE"])
    @_handled
    def remove_demand(self, req, **_):
        d = _body(req, KEY_FIELDS)
        return _json(self.service.remove_hint(d["leaf"], d["ingress_port"], d["dst_prefix"]))

    @route("te", "/te/optimize", methods=["POST"])
    @_handled
    def optimize(self, req, **_):
        return _json(self.service.optimize("REST"))

    @route("te", "/te/interval", methods=["GET"])
    @_handled
    def get_interval(self, req, **_):
        return _json({"interval_s": self.service.interval_s})

    @route("te", "/te/interval", methods=["PUT", "POST"])
    @_handled
    def set_interval(self, req, **_):
        d = _body(req, ("interval_s",))
        return _json(self.service.set_interval(d["interval_s"]))
