import pytest

import basalt


@pytest.fixture
def con():
    c = basalt.connect()
    yield c
    c.close()
