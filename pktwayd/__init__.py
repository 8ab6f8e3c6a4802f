"""pktwayd: PacketWay half-routers (EEP, RRP) joining GSN fabrics with other SANs.

Empty until the PacketWay issue lands; it will use :mod:`daemons.ulpclient`.
"""
