"""TEST DOUBLE (tests/verify_fixtures/optimum_double): NOT THE REAL `optimum` PACKAGE.

A namespace-compatible stand-in so that ``optimum.neuron`` below can be imported by the verify
journey test; it extends its ``__path__`` like a pkgutil namespace package, so a real ``optimum``
installed elsewhere would still provide its other subpackages.
"""

__path__ = __import__("pkgutil").extend_path(__path__, __name__)
