"""The idyn_controller node with a robot's YAML from the package's config/.

    ros2 launch idyn_control idyn_control.launch.py robot:=solo12 formulation:=wbc_qp

Arguments: robot (config/<robot>.yaml), formulation (empty = the YAML's), use_sim_time,
autostart (false: wait for a lifecycle manager to configure and activate).
"""

from launch import LaunchDescription
from launch.actions import DeclareLaunchArgument, OpaqueFunction
from launch.substitutions import LaunchConfiguration
from launch_ros.actions import Node

PACKAGE = "idyn_control"
EXECUTABLE = "idyn_controller"
ROBOTS = ("quadruped", "solo12", "anymal_c", "panda")  # each has config/<robot>.yaml
ROBOT_CONFIG = "config/{robot}.yaml"


def controller_parameters(context):
    """Overrides of the YAML from the launch arguments (names are node parameters)."""
    overrides = {
        "use_sim_time": LaunchConfiguration("use_sim_time").perform(context).lower() == "true",
        "autostart": LaunchConfiguration("autostart").perform(context).lower() == "true",
    }
    formulation = LaunchConfiguration("formulation").perform(context)
    if formulation:
        overrides["formulation"] = formulation
    return overrides


def _controller(context):
    from ament_index_python.packages import get_package_share_directory

    robot = LaunchConfiguration("robot").perform(context)
    share = get_package_share_directory(PACKAGE)
    params_file = f"{share}/{ROBOT_CONFIG.format(robot=robot)}"
    return [Node(
        package=PACKAGE,
        executable=EXECUTABLE,
        name="idyn_controller",
        output="screen",
        emulate_tty=True,
        parameters=[params_file, controller_parameters(context)],
    )]


def generate_launch_description():
    return LaunchDescription([
        DeclareLaunchArgument("robot", default_value="quadruped", choices=list(ROBOTS),
                              description="robot YAML in config/"),
        DeclareLaunchArgument("formulation", default_value="",
                              description="override the YAML's formulation (empty: keep it)"),
        DeclareLaunchArgument("use_sim_time", default_value="false", choices=["true", "false"]),
        DeclareLaunchArgument("autostart", default_value="true", choices=["true", "false"],
                              description="configure and activate without a lifecycle manager"),
        OpaqueFunction(function=_controller),
    ])
