# Injected with -DCMAKE_PROJECT_INCLUDE=... by scripts/setup_env.sh when building against the
# ROS pip wheels (never on a real ROS install).
#
# Why: the wheels' exported CMake targets (e.g. std_msgs::std_msgs__rosidl_generator_py) carry the
# include directories of the manylinux image they were built in (/opt/python/cpXY-cpXY/...).
# CMake refuses to generate when an imported target names a missing include directory, so at the
# end of configuration every imported target's include list is rewritten to this interpreter's
# real Python and NumPy include directories. Nothing is written outside the build tree.
if(NOT DEFINED DLA_PY_INCLUDE OR NOT DEFINED DLA_NUMPY_INCLUDE)
  message(FATAL_ERROR "wheel_fixups.cmake needs -DDLA_PY_INCLUDE=... and -DDLA_NUMPY_INCLUDE=...")
endif()

function(dla_rewrite_wheel_include_dirs)
  get_property(_targets DIRECTORY "${CMAKE_SOURCE_DIR}" PROPERTY IMPORTED_TARGETS)
  set(_count 0)
  foreach(_t IN LISTS _targets)
    get_target_property(_dirs ${_t} INTERFACE_INCLUDE_DIRECTORIES)
    if(NOT _dirs OR NOT _dirs MATCHES "/opt/python/cp")
      continue()
    endif()
    set(_new "")
    foreach(_d IN LISTS _dirs)
      if(_d MATCHES "^/opt/python/cp[0-9]+-cp[0-9]+/include/python[0-9.]+$")
        set(_d "${DLA_PY_INCLUDE}")
      elseif(_d MATCHES "^/opt/python/cp[0-9]+-cp[0-9]+/.*/numpy/(_core/)?include$")
        set(_d "${DLA_NUMPY_INCLUDE}")
      endif()
      list(APPEND _new "${_d}")
    endforeach()
    list(REMOVE_DUPLICATES _new)
    set_target_properties(${_t} PROPERTIES INTERFACE_INCLUDE_DIRECTORIES "${_new}")
    math(EXPR _count "${_count} + 1")
  endforeach()
  message(STATUS "wheel_fixups: rewrote include directories of ${_count} imported targets")
endfunction()

cmake_language(DEFER DIRECTORY "${CMAKE_SOURCE_DIR}" CALL dla_rewrite_wheel_include_dirs)
