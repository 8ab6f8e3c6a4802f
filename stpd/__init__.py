"""stpd: the Scheduled Transfer connection manager (EtherType 0x8181).

Empty until the ST issue lands; it will use :mod:`daemons.ulpclient`.
"""
