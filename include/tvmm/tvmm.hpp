#pragma once
//! @file tvmm.hpp
//! Umbrella header of the tvmm C++ API.

#include "tvmm/config.hpp"
#include "tvmm/errors.hpp"
#include "tvmm/pager.hpp"
#include "tvmm/stats.hpp"
