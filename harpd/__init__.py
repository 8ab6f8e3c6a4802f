"""harpd: HARP/InARP (RFC 2835) client and server over gsnd's ULP socket.

Empty until the HARP issue lands; it will use :mod:`daemons.ulpclient`.
"""
