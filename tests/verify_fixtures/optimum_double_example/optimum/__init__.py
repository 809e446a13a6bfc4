"""TEST DOUBLE (tests/verify_fixtures/optimum_double_example): NOT THE REAL `optimum` PACKAGE.

A namespace-compatible stand-in so that ``optimum.neuron`` below can be imported by
tests/test_verify_example.py; it extends its ``__path__`` like a pkgutil namespace package.
"""

__path__ = __import__("pkgutil").extend_path(__path__, __name__)
